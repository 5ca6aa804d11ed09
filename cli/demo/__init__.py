"""``tickwheel demo``: the main job end to end on real processes (command), its worker
processes and their kill -9 (parts), its handler process (reaction, running handlers),
its Sentinel set (sentinel), and how SIGTERM stops it all (stop)."""

from .command import demo

__all__ = ["demo"]
