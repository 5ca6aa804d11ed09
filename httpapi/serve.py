"""The app as uvicorn's workers build it (``tickwheel serve --workers N``): each process
calls :func:`app_from_env`, which reads what the command put in its environment."""

from __future__ import annotations

import os
from pathlib import Path

from starlette.applications import Starlette

from .app import create_app
from .tokens import TokenFile

URL_ENV = "TICKWHEEL_SERVE_URL"  # the Redis URL (may hold a password: never printed)
TOKENS_ENV = "TICKWHEEL_SERVE_TOKENS"  # the token file; empty: no authentication
CALLBACK_HOSTS_ENV = "TICKWHEEL_SERVE_CALLBACK_HOSTS"  # comma-separated


def app_from_env() -> Starlette:
    tokens = os.environ.get(TOKENS_ENV, "")
    hosts = [h for h in os.environ.get(CALLBACK_HOSTS_ENV, "").split(",") if h]
    return create_app(os.environ[URL_ENV], tokens=TokenFile(Path(tokens)) if tokens else None,
                      callback_hosts=hosts)  # fmt: skip
