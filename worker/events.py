"""The worker's pub/sub listener: schedule / reschedule / decide events for the shards it
leads (``timer/listener.py`` has the listener and what pub/sub is and is not for here)."""

from __future__ import annotations

from timer.listener import ChannelListener as EventListener

__all__ = ["EventListener"]
