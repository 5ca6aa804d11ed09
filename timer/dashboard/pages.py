"""What a person in a browser is shown where the dashboard's API would answer JSON: a
link followed or an address typed (``/api/timers/x``, a timer that does not exist, or a
path that is none of the dashboard's) showed the raw JSON error. A browser opening an
address gets a page in the dashboard's own look saying what was not found, with the way
back to the timers list; a script (the page's own ``fetch``, ``curl``, ``Accept:
application/json``, a Bearer token) keeps the JSON answer. The sign-in page, that
:class:`timer.dashboard.guard.Guard` shows a browser not signed in, is here too."""

from __future__ import annotations

import base64
import hashlib
import html
import urllib.parse

from starlette.requests import Request
from starlette.responses import HTMLResponse

# The page runs only what the dashboard serves: no inline script, style or handler, no
# other origin, not framed (an injected tag in a timer id or an error text stays text).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

# The page's views, as its header names them (index.html, nav.js)
NAV = (
    ("/", "Overview"),
    ("/timers", "Timers"),
    ("/groups", "Groups"),
    ("/dead-letters", "Dead letters"),
    ("/schedules", "Schedules"),
    ("/workers", "Workers"),
    ("/shards", "Shards"),
)

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title} · tickwheel</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/static/dashboard.css">
<script src="/static/theme.js"></script>
</head>
<body>
<header>
  <h1>tickwheel</h1>
  <nav aria-label="views">{nav}</nav>
</header>
<main>
  <section id="refused">
    <h2>{title}</h2>
    <div id="message" class="error" role="alert">{said}</div>
    <p><a id="back" href="{back}">Back to the timers list</a></p>
  </section>
</main>
</body>
</html>
"""


def wants_page(request: Request) -> bool:
    """A browser opening an address: a GET (or HEAD) that accepts HTML and does not ask
    for JSON, with no Bearer token (a script's). The page's scripts ``fetch`` with
    ``Accept: */*`` and follow the live stream with ``text/event-stream``: JSON for them."""
    accept = request.headers.get("accept", "").lower()
    return (
        request.method in ("GET", "HEAD")
        and "text/html" in accept
        and "application/json" not in accept
        and "authorization" not in request.headers
    )


def error_page(request: Request, status: int, said: str) -> HTMLResponse:
    """The page for an error of ``status`` whose words are ``said`` (the JSON's
    ``error``, a user's values quoted in it: escaped here), its links keeping the
    namespace the request asked for (``?ns=``)."""
    ns = request.query_params.get("ns")
    query = "?ns=" + urllib.parse.quote(ns, safe="") if ns else ""
    nav = "".join(f'<a href="{path}{html.escape(query)}">{name}</a>' for path, name in NAV)
    page = PAGE.format(
        title="Not found" if status == 404 else "Not shown",
        nav=nav,
        said=html.escape(said[:1].upper() + said[1:]),
        back=html.escape("/timers" + query),
    )
    headers = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"}
    return HTMLResponse(page, status_code=status, headers=headers)


# The sign-in page (timer.dashboard.guard shows it, with why the last try was refused)
SIGN_IN = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tickwheel: sign in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font:15px system-ui,sans-serif;max-width:34em;margin:4em auto;padding:0 1em}
input{width:100%;font:inherit;padding:6px;margin:8px 0}button{font:inherit;padding:6px 14px}
.refused{border-left:4px solid #b3261e;padding:6px 10px;background:#fdecea;color:#5f1410}
</style></head><body>
<h1>Sign in</h1>
{refused}<p>{ask}</p>
<form method="post" action="/login"><label>Token
<input name="token" type="password" autocomplete="off" placeholder="tw_…" required autofocus>
</label><input type="hidden" name="next" value="{next}"><button type="submit">Sign in</button>
</form><script>{keep_hash}</script>
</body></html>
"""
# The page's one script, allowed by its hash alone: the address's fragment (the timer a
# shared link opens, /timers#timer=…) is never sent to the server, so it is added to the
# page the sign-in goes on to here (a page shown again after a wrong token keeps its own)
KEEP_HASH = (
    'const next = document.querySelector("input[name=next]");'
    'if (location.hash) next.value = next.value.split("#")[0] + location.hash;'
)
SIGN_IN_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-"
    + base64.b64encode(hashlib.sha256(KEEP_HASH.encode()).digest()).decode()
    + "'; form-action 'self'"
)
