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


def app_from_env() -> Starlette:
    tokens = os.environ.get(TOKENS_ENV, "")
    return create_app(os.environ[URL_ENV], tokens=TokenFile(Path(tokens)) if tokens else None)
