"""tickwheel's web dashboard (``tickwheel dashboard``): shards, workers, consumer groups,
dead letters and timers of a namespace, read and acted on through ``TimerClient``."""

from .app import create_app

__all__ = ["create_app"]
