"""What a step costs a server: its CPU (``INFO cpu``, the process's own, I/O and
parsing included), ``commandstats`` beside it, and its memory; a namespace dropped
between steps. For ``benchmarks.capacity``."""

from __future__ import annotations

import redis


def used(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


def server_cpu_us(r: redis.Redis) -> float:
    """The server process's CPU time so far (user + system), in microseconds."""
    cpu = r.info("cpu")
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6


class Meter:
    """Server CPU (``INFO cpu``) since :meth:`start`, which also resets ``commandstats``
    (for :func:`command_usec` and :func:`script_usec` over the same step)."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self.cpu0 = 0.0

    def start(self) -> None:
        self.r.config_resetstat()
        self.cpu0 = server_cpu_us(self.r)

    def cpu_us(self) -> float:
        return server_cpu_us(self.r) - self.cpu0


def script_usec(r: redis.Redis) -> tuple[int, int]:
    """(usec, calls) of every script run since the last CONFIG RESETSTAT."""
    stats = r.info("commandstats")
    usec = calls = 0
    for name, row in stats.items():
        if name in {"cmdstat_evalsha", "cmdstat_eval"}:
            usec += int(row["usec"])
            calls += int(row["calls"])
    return usec, calls


def drop_namespace(r: redis.Redis, ns: str) -> None:
    for key in r.scan_iter(match=f"{{tw:{ns}*", count=10_000):
        r.delete(key)  # not UNLINK: a background free would disturb the next measurement


def command_usec(r: redis.Redis) -> int:
    """``usec`` of every command since the last CONFIG RESETSTAT but the benchmark's own
    (INFO, CONFIG), as ``commandstats`` counts it: without I/O and parsing, and a
    script's commands twice (in its own ``usec``, and under their names)."""
    return sum(
        int(row["usec"])
        for name, row in r.info("commandstats").items()
        if name not in {"cmdstat_info", "cmdstat_config"}
    )
