"""Argument types for the benchmarks' numeric options: a bad value is argparse's usage
error (exit 2) naming the option and saying what it takes, before anything starts.

``type=int`` took any integer: ``0`` often meant the default (``args.n or 200_000``)
and a negative count failed mid-run, after servers had started. Every numeric option of
every benchmark takes one of these instead (``tests/unit/test_benchmark_options.py``
checks each parser for it)::

    p.add_argument("--n", type=count("timers"), default=None)
    p.add_argument("--span", type=seconds(), default=None)
"""

from __future__ import annotations

import argparse
import math


class count:
    """A whole number of ``unit``, at least ``minimum``."""

    def __init__(self, unit: str, minimum: int = 1) -> None:
        self.unit = unit
        self.minimum = minimum
        self.__name__ = f"number of {unit}"  # argparse names a type by it in its errors

    def __call__(self, text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number of {self.unit}"
            ) from None
        if n < self.minimum:
            raise argparse.ArgumentTypeError(f"{n} {self.unit}: give at least {self.minimum}")
        return n

    def refused(self) -> list[str]:
        """Values this type refuses (for the test over every parser)."""
        return [str(self.minimum - 1), "x", "1.5"]


class seconds:
    """A finite number of seconds, more than ``above``."""

    def __init__(self, above: float = 0.0) -> None:
        self.above = above
        self.__name__ = "seconds"

    def __call__(self, text: str) -> float:
        try:
            s = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not math.isfinite(s) or s <= self.above:
            raise argparse.ArgumentTypeError(f"{text} seconds: give more than {self.above:g}")
        return s

    def refused(self) -> list[str]:
        return [f"{self.above:g}", "nan", "inf", "x"]


class counts:
    """A comma-separated list of whole numbers of ``unit``, each at least ``minimum``."""

    def __init__(self, unit: str, minimum: int = 1) -> None:
        self.one = count(unit, minimum)
        self.__name__ = f"list of {unit}"

    def __call__(self, text: str) -> tuple[int, ...]:
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(
                f"{text!r}: give one or more {self.one.unit}, comma-separated (1,2,4)"
            )
        return tuple(self.one(p) for p in parts)

    def refused(self) -> list[str]:
        return ["", ",", f"1,{self.one.minimum - 1}", "1,x"]
