"""A URL with its credentials masked, safe to print and log (:func:`redact_url`)."""

from __future__ import annotations

import re

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
