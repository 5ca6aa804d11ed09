"""A URL with its credentials masked, safe to print and log (:func:`redact_url`), and
what a refused URL's error says of it without saying a secret back."""

from __future__ import annotations

import re

from ..errors import ConfigError, quoted

# Query options of a Redis URL whose value is a credential: redis-py passes ``password``
# and ``username`` to AUTH, ``ssl_password`` unlocks a TLS key; any other name that
# speaks of a secret is masked too, whatever a later redis-py makes of it.
_SECRET_VALUE = re.compile(
    r"(?i)([?&#;/][^=?&#;/]*(?:pass|secret|token|auth|credential|user)[^=?&#;/]*=)[^&#;]*"
)


def redact_url(url: str, *, path: bool = True) -> str:
    """The URL with every credential replaced by ``***`` (safe to print and log).

    Masked: the password of ``user:password@``, the whole userinfo when it has no
    ``:`` (``redis://S3CRET@host``, where a password is often meant), and the value of
    every query option that carries one (``?password=``, ``?username=``,
    ``?ssl_password=``). Works on any text, parseable as a URL or not.

    ``path=False``: everything after the host and port (path, query, fragment) is shown
    as ``/…``. A webhook's token is as often a piece of its path
    (``https://hooks.slack.com/services/T0/B0/SECRET``) as a query option of any name,
    so no part of either can be told safe; a Redis URL's path is its database number.
    """
    if not isinstance(url, str):
        return "<not a url>"
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo = ""
    if "@" in rest:  # the last @ ends the userinfo, whatever the password holds (/ ? #)
        user, at, rest = rest.rpartition("@")
        name, colon, _password = user.partition(":")
        plain = colon and not any(c in name for c in "/?#@")  # an @ in it: all is secret
        userinfo = f"{name}:***{at}" if plain else f"***{at}"
    netloc, slash, tail = rest.partition("/")
    netloc, qmark, query = netloc.partition("?")  # redis://host?password=… has no path
    if not path:
        netloc, hashmark, _ = netloc.partition("#")
        slash = "/…" if slash or qmark or hashmark else ""
        tail = qmark = query = ""
    head_, colon_, port = netloc.rpartition(":")
    if colon_ and "]" not in port and port and not port.isdigit():  # a password typed
        netloc = f"{head_}:***"  # where the port goes (redis://:pass/0)
    tail = _SECRET_VALUE.sub(r"\1***", f"{qmark}{query}{slash}{tail}")
    return f"{scheme}{sep}{userinfo}{netloc}{tail}"


def reserved_in_userinfo(url: str) -> str:
    """What to say of a URL whose user or password holds a / ? # or @ (which end the
    host's part early, so the parse reads a piece of the password as the port or the
    host), or "": said only where the URL is refused anyway, and never the password."""
    rest = url.partition("://")[2]
    if "@" not in rest:
        return ""
    userinfo = rest.rpartition("@")[0]
    held = [c for c in "/?#@" if c in userinfo]
    if not held:
        return ""
    # an @ alone parses (the host starts after the last one): it is named, not required
    ends = [c for c in held if c != "@"]
    codes = {"/": "%2F", "?": "%3F", "#": "%23", "@": "%40"}
    said = " ".join(ends or held)
    return (
        f"its user or password holds {said}, which must be percent-encoded there "
        f"({' '.join(codes[c] for c in ends or held)})"
        + ("; an @ there is safest encoded too (%40)" if ends and "@" in held else "")
    )


URL_FORMS = (
    "use redis://host:port/db, rediss:// for TLS, unix:///path/to.sock, or "
    "redis+sentinel://host:port,host:port/<service> for Sentinel"
)


def no_scheme(url: str, safe: str) -> ConfigError:
    """Why a URL with no ``scheme://`` is refused: a slash left out (``redis:/host``), a
    host:port alone (what to write), else nothing said back (a password pasted?)."""
    slash = re.match(r"(rediss?|unix):/?(?!/)", url, re.IGNORECASE)
    if slash:
        return ConfigError(
            f"the Redis URL starts {quoted(slash.group(0))}: a scheme is followed by two "
            f"slashes ({slash.group(1).lower()}://…); {URL_FORMS}"
        )
    user, at, hostpart = url.rpartition("@")  # user:password@host:port: no password said
    if re.fullmatch(r"[\w.\-]+:\d{1,5}(/\d+)?", hostpart):
        also = " (with the password where *** is)" if at and user else ""
        return ConfigError(f"{safe} has no scheme: did you mean redis://{safe}?{also}")
    return ConfigError(f"the Redis URL has no scheme (no redis:// or the like); {URL_FORMS}")
