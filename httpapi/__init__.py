"""tickwheel's HTTP API (`tickwheel serve`): see httpapi.app."""

from .app import create_app

__all__ = ["create_app"]
