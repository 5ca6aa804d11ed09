"""Every benchmark's numeric options refuse a bad value as argparse's usage error (exit
2) naming the option, before anything starts: ``tickwheel bench NAME`` is a door too."""

from __future__ import annotations

import argparse
import importlib
import math
import os
import pkgutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import benchmarks
from benchmarks.options import count, counts, seconds
from timer.cli.bench_cmd import NAMES


class Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def benchmark_mains() -> list[ModuleType]:
    """Every module of ``benchmarks`` with a ``main`` (read from its source first: the
    peers' job modules import the peers themselves, which a test run may not have)."""
    found = []
    for info in pkgutil.iter_modules(benchmarks.__path__):
        source = Path(benchmarks.__path__[0], f"{info.name}.py").read_text()
        if "\ndef main(" in source:
            found.append(importlib.import_module(f"benchmarks.{info.name}"))
    return found


MAINS = benchmark_mains()


def parser_of(module: ModuleType) -> argparse.ArgumentParser:
    """The parser ``module.main`` builds, taken at its ``parse_args`` (nothing after it runs)."""

    def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise Captured(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(argparse.ArgumentParser, "parse_args", capture)
        with pytest.raises(Captured) as got:
            module.main([])
    return got.value.parser


def typed_options() -> list[tuple[ModuleType, str, Callable[[str], Any]]]:
    return [
        (module, action.option_strings[-1], action.type)
        for module in MAINS
        for action in parser_of(module)._actions
        if action.option_strings and callable(action.type)
    ]


OPTIONS = typed_options()


def test_the_benchmarks_are_found() -> None:
    """The discovery cannot pass by finding nothing: the main ones, and their options."""
    names = {m.__name__.rsplit(".", 1)[1] for m in MAINS}
    assert {"capacity", "register", "peers", "engine", "http_api"} <= names, names
    assert len(OPTIONS) >= 45, len(OPTIONS)


def test_tickwheel_bench_runs_every_benchmark() -> None:
    """`tickwheel bench NAME` reaches every benchmark (``all`` is run_all; ``table`` only
    rewrites the Measured page), so every door these options guard is open there too."""
    mains = {m.__name__ for m in MAINS} - {"benchmarks.table"}
    assert set(NAMES.values()) == mains, set(NAMES.values()) ^ mains


@pytest.mark.parametrize(
    ("module", "option", "kind"), OPTIONS, ids=[f"{m.__name__[11:]}{o}" for m, o, _ in OPTIONS]
)
def test_a_numeric_option_refuses_a_bad_value_before_anything_starts(
    module: ModuleType, option: str, kind: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """No option takes a bare int or float (0 meant the default and a negative count
    failed mid-run); each one's refused values are a usage error naming it."""
    if not isinstance(kind, count | seconds | counts):
        assert kind not in (int, float), f"{module.__name__} {option}: type={kind.__name__}"
        return  # a path, say: not a number
    for bad in kind.refused():
        with pytest.raises(SystemExit) as stopped:
            module.main([option, bad])
        assert stopped.value.code == 2, (option, bad)
        err = capsys.readouterr().err
        assert f"argument {option}: " in err and ("give" in err or "not a" in err), err


@pytest.mark.parametrize(
    ("kind", "good", "value"),
    [
        (count("timers"), "1", 1),
        (count("timers"), " 20000 ", 20_000),
        (count("bytes", 0), "0", 0),
        (seconds(), "0.5", 0.5),
        (seconds(above=1), "1.5", 1.5),
        (counts("workers"), "1,2,4", (1, 2, 4)),
        (counts("workers"), "3", (3,)),
    ],
)
def test_the_values_at_the_edge_are_taken(kind: Any, good: str, value: Any) -> None:
    assert kind(good) == value


@pytest.mark.parametrize(
    ("kind", "bad", "says"),
    [
        (count("timers"), "0", "0 timers: give at least 1"),
        (count("timers"), "-5", "-5 timers: give at least 1"),
        (count("timers"), "2k", "'2k' is not a whole number of timers"),
        (count("bytes", 0), "-1", "give at least 0"),
        (seconds(), "0", "give more than 0"),
        (seconds(), "-inf", "give more than 0"),
        (seconds(), "nan", "give more than 0"),
        (seconds(above=1), "1", "give more than 1"),
        (counts("workers"), "1,,0", "0 workers: give at least 1"),
        (counts("workers"), " , ", "give one or more workers"),
    ],
)
def test_a_bad_value_says_what_to_give(kind: Any, bad: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=says):
        kind(bad)


EXAMPLES = int(os.environ.get("TICKWHEEL_FUZZ_EXAMPLES", "200"))
KINDS = [count("timers"), count("bytes", 0), seconds(), seconds(above=1), counts("workers")]


@settings(max_examples=EXAMPLES, deadline=None)
@given(kind=st.sampled_from(KINDS), text=st.text())
def test_any_text_is_a_value_in_bounds_or_a_usage_error(kind: Any, text: str) -> None:
    """Whatever is typed: a value the option takes, or ArgumentTypeError (argparse's
    usage error, exit 2), never another exception and never a value out of bounds."""
    try:
        value = kind(text)
    except argparse.ArgumentTypeError as refused:
        assert str(refused)
        return
    values = value if isinstance(kind, counts) else (value,)
    for v in values:
        if isinstance(kind, seconds):
            assert math.isfinite(v) and v > kind.above
        else:
            limit = kind.one.minimum if isinstance(kind, counts) else kind.minimum
            assert isinstance(v, int) and v >= limit
