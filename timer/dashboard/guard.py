"""Who may ask the dashboard what, checked before any route runs (:class:`Guard`): the
host allow-list, the token (one shared token, or each user's own from the HTTP API's
token file: :func:`user_of`), and the cross-site check of every POST."""

from __future__ import annotations

import hmac
import html
import logging
import re
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from timer.errors import ConfigError, quoted
from timer.httpapi.routing import JSONReply, cross_site
from timer.httpapi.tokens import Token, TokenFile

from .pages import KEEP_HASH, SIGN_IN, SIGN_IN_POLICY

log = logging.getLogger("tickwheel.dashboard")  # the actions refused here, as routes.py's

COOKIE = "tickwheel_token"
UNSCOPED = ("/static/", "/favicon.")  # what a signed-in token reads whatever its namespaces
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
CSRF_COOKIE = "tickwheel_csrf"
CSRF_HEADER = "x-csrf-token"

# Why a token was refused, told apart from having none (the token itself is never said)
WRONG_TOKEN = (
    "wrong token: give one `tickwheel tokens create` printed (`tickwheel tokens list` names "
    "them; a token is kept hashed, so it is shown once)"
)
WRONG_BEARER = (
    "the Bearer token given was not accepted: send one `tickwheel tokens create` printed "
    "(`tickwheel tokens list` names them only: a token is kept hashed, so it is shown once; "
    "make a new one with `tickwheel tokens create`)"
)
WRONG_SHARED_BEARER = (
    "the Bearer token given was not accepted: send the token the dashboard was started "
    "with (TICKWHEEL_DASHBOARD_TOKEN)"
)

# The ``kind`` of each refusal, as a library error's class names it in the routes' errors
# (one shape: {"error", "kind", "exit_code"}); a refusal's exit code is a ConfigError's, 4
# (the HTTP API's for its own), bad input's 3
UNKNOWN_HOST = "UnknownHost"  # 400: a Host this dashboard does not answer for
NOT_SIGNED_IN = "NotSignedIn"  # 401: no token given
TOKEN_REFUSED = "WrongToken"  # 401: a token given and not accepted
FORBIDDEN = "Forbidden"  # 403: the token may not do that (read only, another namespace)
CROSS_SITE = "CrossSite"  # 403: a POST (or a sign-in) from another site's page
INVALID = "InvalidInput"  # a sign-in's body that is not the form's
EXIT_CODES = {INVALID: 3, "MethodNotAllowed": 3, "NotFound": 6}


def host_name(host_header: str) -> str:
    """The host of a ``Host`` header, without its port (``[::1]:8080`` -> ``::1``)."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Guard(BaseHTTPMiddleware):
    """Who may ask what, checked before any route runs.

    - **Host allow-list** (every request): a page served for another name (DNS
      rebinding: ``attacker.example`` resolved to 127.0.0.1) is refused with 400.
    - **Token** (when set): ``Authorization: Bearer <token>`` or the cookie that
      the sign-in page's form sets (``/login?token=<token>`` too).
    - **Cross-site requests** (every POST): the browser must say the request came from
      this dashboard's own page, by ``Origin`` or ``Sec-Fetch-Site: same-origin``, and
      it must carry the page's CSRF token in ``X-CSRF-Token``, equal to the
      ``SameSite=Strict`` cookie the page set. A request with the Bearer header needs
      neither: a browser never sends that header cross-site on its own.

    With a token file (``tokens``), each user signs in with a token of their own (the
    HTTP API's: ``tickwheel tokens create``), scoped to namespaces: ``read`` sees
    everything and changes nothing, ``write`` and ``admin`` act too. A sign-in with a
    token that may not read the namespace it asks for (``?ns=``, else the dashboard's) is
    refused, saying which namespaces the token is for. The request's token is
    ``request.state.user`` for the routes (who did what, in the log).

    Each refusal is the API's one error shape, ``{"error", "kind", "exit_code"}``
    (:func:`refusal`); a browser opening a page gets the sign-in page saying why.
    """

    def __init__(
        self,
        app: Any,
        *,
        token: str | None,
        csrf: str,
        allowed_hosts: frozenset[str],
        tokens: TokenFile | None = None,
        namespace: str = "default",
    ) -> None:
        super().__init__(app)
        self.token = token
        self.csrf = csrf
        self.allowed_hosts = allowed_hosts
        self.tokens = tokens
        self.namespace = namespace  # the one a request without ?ns= is about

    async def dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        host = host_name(request.headers.get("host", ""))
        if "*" not in self.allowed_hosts and host not in self.allowed_hosts:
            return refusal(
                400,
                UNKNOWN_HOST,
                f"this dashboard does not answer for host {quoted(host, 100)}; start it "
                "with --allowed-host NAME to serve that name",
            )
        bearer = _bearer(request)
        typed: str | None = None  # the token a sign-in gave (/login only)
        if request.url.path == "/login" and (self.tokens is not None or self.token is not None):
            typed, refused_sign_in = await _login_token(request)
            if refused_sign_in is not None:
                return refused_sign_in
        if self.tokens is not None:
            refused = self.sign_in(request, bearer, typed)
            if refused is not None:
                return refused
        elif self.token is not None:
            if typed is not None:
                return self.login(request, typed)
            given = bearer or request.cookies.get(COOKIE, "")
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                if bearer:
                    return refusal(401, TOKEN_REFUSED, WRONG_SHARED_BEARER)
                return _sign_in_page(request, ask=ASK_SHARED) or refusal(
                    401,
                    NOT_SIGNED_IN,
                    "this dashboard needs its token: sign in on its page with it, or send "
                    "Authorization: Bearer …",
                )
        if request.method not in ("GET", "HEAD", "OPTIONS") and not bearer:
            why = self.cross_site(request)
            if why:
                return refusal(403, CROSS_SITE, f"refused a cross-site request: {why}")
        return await call_next(request)

    def sign_in(self, request: Request, bearer: str, typed: str | None) -> Response | None:
        """The user's token from the file (or a refusal): a sign-in (``typed``, from
        /login) sets its cookie; a GET needs ``read`` on the request's namespace, anything
        else ``write``."""
        assert self.tokens is not None
        try:
            if typed is not None:
                given = typed
                if not given:
                    return _sign_in_page(request) or refusal(
                        401,
                        NOT_SIGNED_IN,
                        "no token given: sign in on the page with a token `tickwheel "
                        "tokens create` printed",
                    )
                user = self.tokens.check(given)
                if user is None:  # the page says so, as the JSON does
                    return _sign_in_page(request, WRONG_SIGN_IN) or refusal(
                        401, TOKEN_REFUSED, WRONG_TOKEN
                    )
                return self.signed_in(request, user, given)
            user = self.tokens.check(bearer or request.cookies.get(COOKIE, ""))
        except ConfigError as exc:  # the token file cannot be read: nobody gets in
            return refusal(503, type(exc).__name__, str(exc))
        if user is None and bearer:  # a script's token refused, not one missing
            return refusal(401, TOKEN_REFUSED, WRONG_BEARER)
        if user is None:
            return _sign_in_page(request) or refusal(
                401,
                NOT_SIGNED_IN,
                "sign in on the page with a token of `tickwheel tokens create`, or send "
                "Authorization: Bearer …",
            )
        namespace = request.query_params.get("ns") or self.namespace
        need = "read" if request.method in ("GET", "HEAD", "OPTIONS") else "write"
        if need == "read" and request.url.path.startswith(UNSCOPED):
            request.state.user = user  # the page's files are of no namespace: a token for
            return None  # another's page was refused its script (the page stayed blank)
        if not user.allows(need, namespace):
            if need == "write" and user.allows("read", namespace):
                why = f"token {named(user)} may only read: ask for a write token"
            else:  # a browser opening a page is shown why, with the form to sign in again
                why = not_for(user, namespace)
                page = _sign_in_page(request, _not_for_page(user, namespace), status=403)
                if page is not None:
                    return page
            if need == "write":  # an action refused is logged as one done is (who tried)
                log.info(
                    "%s %s %s in namespace %r: 403 refused (%s)",
                    who(user),
                    request.method,
                    request.url.path,
                    namespace,
                    why,
                    extra={"namespace": namespace, "user": who(user)},
                )
            return refusal(403, FORBIDDEN, why)
        request.state.user = user
        return None

    def signed_in(self, request: Request, user: Token, given: str) -> Response:
        """A sign-in with a token of the file: its cookie set and the page opened, if the
        token may read the namespace asked for (``?ns=``, else the dashboard's own); else
        the sign-in page again saying whose it is (a script: the JSON refusal), no cookie.
        It set the cookie, then every page was that refusal's raw JSON."""
        asked = request.query_params.get("ns")
        namespace = asked or self.namespace
        if not user.allows("read", namespace):
            return _sign_in_page(request, _not_for_page(user, namespace)) or refusal(
                403, FORBIDDEN, not_for(user, namespace)
            )
        return _signed_in(request, given)

    def login(self, request: Request, given: str) -> Response:
        assert self.token is not None
        if not given:
            return _sign_in_page(request, ask=ASK_SHARED) or refusal(
                401,
                NOT_SIGNED_IN,
                "no token given: sign in on the page with the token the dashboard was "
                "started with (TICKWHEEL_DASHBOARD_TOKEN)",
            )
        if hmac.compare_digest(given.encode(), self.token.encode()):
            return _signed_in(request, given)
        return _sign_in_page(request, WRONG_SHARED_SIGN_IN, ask=ASK_SHARED) or refusal(
            401,
            TOKEN_REFUSED,
            "wrong token: give the one the dashboard was started with (TICKWHEEL_DASHBOARD_TOKEN)",
        )

    def cross_site(self, request: Request) -> str:
        """Why a state-changing request is not from this dashboard's page ('' if it is)."""
        why = cross_site(request, "dashboard", navigation=False)
        if why:
            return why
        if "origin" not in request.headers and "sec-fetch-site" not in request.headers:
            return f"no Origin or Sec-Fetch-Site header ({self.script_hint()})"
        header = request.headers.get(CSRF_HEADER, "")
        cookie = request.cookies.get(CSRF_COOKIE, "")
        if not (
            hmac.compare_digest(header.encode(), self.csrf.encode())
            and hmac.compare_digest(cookie.encode(), self.csrf.encode())
        ):
            return "the CSRF token is missing or stale (reload the page)"
        return ""

    def script_hint(self) -> str:
        """How a script's POST gets past the cross-site check, as this dashboard is set up:
        the Bearer header (it needs no Origin nor CSRF token), with the token it takes."""
        if self.tokens is not None:
            token = "a write token of `tickwheel tokens create`"
        elif self.token is not None:
            token = "the token the dashboard was started with (TICKWHEEL_DASHBOARD_TOKEN)"
        else:
            return (
                "use the page; a script sends an Authorization: Bearer header, any value "
                "while the dashboard has no token (start it with TICKWHEEL_DASHBOARD_TOKEN "
                "set, or --tokens FILE, to require one)"
            )
        return f"use the page; a script sends Authorization: Bearer <token>, {token}"


def user_of(request: Request) -> Token | None:
    """The token the request signed in with (a token file's), if any."""
    return getattr(request.state, "user", None)


def who(user: Token | None) -> str:
    """How the log names a user: the token's name (as the log quotes values: its repr),
    else its id."""
    if user is None:
        return "the dashboard's own user"
    return repr(user.name) if user.name else f"id {user.id}"


def named(user: Token) -> str:
    """How a refusal or the sign-in page names a user's token: its name quoted as every
    error quotes a value (JSON-style: :func:`timer.errors.quoted`), else its id."""
    return quoted(user.name, 100) if user.name else f"id {user.id}"


LOGIN_BODY_LIMIT = 4096  # a token is 62 characters; a form of more is not a sign-in
FORM_BODY = "sign in with the form's body: token=… (form-urlencoded)"


async def _login_token(request: Request) -> tuple[str, Response | None]:
    """The token a sign-in gave, or why it is refused, and the page it goes on to
    (``next``, kept as ``request.state.next_page``): the sign-in page's form POSTs them
    (so the token never lands in the browser's history or a proxy's log, as a query
    does); ``/login?token=…`` (a script's or a bookmark's) still signs in. A POST from
    another site's page is refused (it would sign the user in as someone else)."""
    if request.method in ("GET", "HEAD"):
        request.state.next_page = request.query_params.get("next", "")
        return request.query_params.get("token", ""), None
    if request.method != "POST":
        return "", refusal(
            405, "MethodNotAllowed", "sign in with GET /login?token=… or the sign-in page's form"
        )
    why = cross_site(request, "dashboard", navigation=False)
    if why:
        return "", refusal(403, CROSS_SITE, f"refused a cross-site sign-in: {why}")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return "", refusal(415, INVALID, FORM_BODY)
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > LOGIN_BODY_LIMIT:
            return "", refusal(413, INVALID, f"a sign-in is at most {LOGIN_BODY_LIMIT} bytes")
    try:
        fields = urllib.parse.parse_qs(body.decode(), max_num_fields=10)
    except (UnicodeDecodeError, ValueError):
        return "", refusal(400, INVALID, FORM_BODY)
    request.state.next_page = (fields.get("next") or [""])[0]
    return (fields.get("token") or [""])[0], None


NEXT_PATH = re.compile(r"/(?![/\\])[\x21-\x7e]*")  # one /, then printable ASCII
NEXT_LIMIT = 2000


def local_page(value: str) -> str | None:
    """``value`` if it is a page of this dashboard for a sign-in to go on to: a path of
    its own with its query and fragment (``/timers?ns=a#timer=job%3A1``). Anything else
    is None (the sign-in goes home), so no link sends a user who signs in to another
    site (``//evil.example``, ``https://…``, ``/\\evil.example``) or back to /login."""
    path, hashed, fragment = value.partition("#")
    if len(value) > NEXT_LIMIT or not NEXT_PATH.fullmatch(path) or "\\" in path:
        return None
    split = urllib.parse.urlsplit(path)
    if split.scheme or split.netloc or split.path == "/login":
        return None
    # the fragment as the browser had it (location.hash); anything else in it escaped
    return path + (
        "#" + urllib.parse.quote(fragment, safe="/?:@!$&'()*+,;=%-._~") if hashed else ""
    )


def _asked(request: Request) -> str:
    """The page a sign-in shown at this request goes on to: the one asked for (its path
    and query as sent), or at /login the one the sign-in carried (``next``)."""
    if request.url.path == "/login":
        return local_page(getattr(request.state, "next_page", "")) or ""
    path = (request.scope.get("raw_path") or request.url.path.encode()).decode("latin-1")
    query = (request.scope.get("query_string") or b"").decode("latin-1")
    return local_page(path + ("?" + query if query else "")) or ""


def _signed_in(request: Request, given: str) -> Response:
    """A sign-in let in: its cookie, and the page it was asked for on (``next``: a path
    of this dashboard's own), else the page of the namespace it asked for."""
    asked = request.query_params.get("ns")
    home = "/?ns=" + urllib.parse.quote(asked, safe="") if asked else "/"
    response = RedirectResponse(_asked(request) or home, status_code=303)
    response.set_cookie(COOKIE, given, httponly=True, samesite="strict")
    return response


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    return header[7:] if header.lower().startswith("bearer ") else ""


# What the sign-in page asks for: a token of the token file, or the one shared token
ASK_FILE = (
    "This dashboard asks for a token: paste one that <code>tickwheel tokens create</code>\n"
    "printed (a read token shows, a write token may act too)."
)
ASK_SHARED = (
    "This dashboard asks for its token: paste the one it was started with\n"
    "(its <code>TICKWHEEL_DASHBOARD_TOKEN</code>)."
)
WRONG_SHARED_SIGN_IN = "That token was not accepted: paste the one the dashboard was started with."
# What the sign-in page says above its form when the token typed was refused
WRONG_SIGN_IN = (
    "That token was not accepted. Paste one that <code>tickwheel tokens create</code> printed: "
    "<code>tickwheel tokens list</code> shows the tokens' names only (a token is kept hashed, "
    "so it is shown once); make a new one with <code>tickwheel tokens create</code>."
)


def not_for(user: Token, namespace: str) -> str:
    """Why ``user`` may not read ``namespace``, naming the ones it is for (never its secret)."""
    said = ", ".join(quoted(ns, 100) for ns in user.namespaces[:10])
    more = f" and {len(user.namespaces) - 10} more" if len(user.namespaces) > 10 else ""
    return (
        f"token {named(user)} is not for namespace {quoted(namespace, 100)} (it is for "
        f"{'namespace' if len(user.namespaces) == 1 else 'namespaces'} {said}{more})"
    )


def _not_for_page(user: Token, namespace: str) -> str:
    """What the sign-in page says of a token that may not read ``namespace``: whose it is,
    with a link to each namespace's dashboard it is for (markup; names escaped)."""
    links = ", ".join(
        f'<a href="/?ns={html.escape(urllib.parse.quote(ns, safe=""))}">{html.escape(ns)}</a>'
        for ns in user.namespaces[:10]
    )
    return (
        f"Token {html.escape(named(user))} is not for namespace "
        f"<code>{html.escape(namespace)}</code>: it is for {links} (follow "
        f"{'that link' if len(user.namespaces) == 1 else 'one of those links'} and sign in "
        f"there with it). To see <code>{html.escape(namespace)}</code>, paste a token for it."
    )


def _sign_in_page(
    request: Request, refused: str = "", ask: str = ASK_FILE, status: int = 401
) -> Response | None:
    """The sign-in page, for a browser opening a page (not for a script or the page's
    own requests, which get the JSON refusal): it showed them raw JSON. ``refused``
    (markup of ours, never the token typed): why the last try was not let in. Its form
    signs in to the namespace the page asked for (``?ns=``), then goes on to the page
    asked for (``next``: its path, query and, by the page's script, fragment)."""
    asked = request.method == "GET" or (request.method == "POST" and request.url.path == "/login")
    wants_page = asked and "text/html" in request.headers.get("accept", "")
    if not wants_page:
        return None
    headers = {"Content-Security-Policy": SIGN_IN_POLICY, "X-Content-Type-Options": "nosniff"}
    said = f'<p class="refused" role="alert">{refused}</p>\n' if refused else ""
    ns = request.query_params.get("ns")
    action = "/login?ns=" + html.escape(urllib.parse.quote(ns, safe="")) if ns else "/login"
    page = SIGN_IN.replace("{refused}", said).replace("{ask}", ask)
    page = page.replace("{next}", html.escape(_asked(request))).replace("{keep_hash}", KEEP_HASH)
    page = page.replace('action="/login"', f'action="{action}"')
    return HTMLResponse(page, status_code=status, headers=headers)


def refusal(status: int, kind: str, message: str) -> JSONReply:
    """A refusal in the one error shape of the dashboard's API: ``{"error", "kind",
    "exit_code"}``, as a library error is answered (routes.py)."""
    body = {"error": message, "kind": kind, "exit_code": EXIT_CODES.get(kind, 4)}
    return JSONReply(body, status_code=status)
