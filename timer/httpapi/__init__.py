"""tickwheel's HTTP API (`tickwheel serve`): see timer.httpapi.app.

``create_app`` is imported when first asked for: ``timer.httpapi.tokens`` (``tickwheel
tokens``) and ``timer.httpapi.routing`` (the dashboard's) need none of the HTTP extra's
schema checkers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app  # noqa: PLC0415 - lazily, see above

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
