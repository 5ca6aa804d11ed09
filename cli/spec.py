"""A handler SPEC (``MODULE:FUNCTION``) resolved, and the Handlers that ``tickwheel
handle`` runs, made from it and the command's flags (a Handlers object's own settings
kept unless a flag overrides them)."""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import inspect
import os
import pkgutil
import sys
import sysconfig
import traceback
from pathlib import Path, PurePath
from types import ModuleType
from typing import Any

import click

import timer
from timer.durable.model.durations import format_duration_ms
from timer.durable.model.models import OUTCOMES
from timer.errors import InvalidInput, quoted
from timer.handlers import DEFAULT_GROUP, DEFAULT_RECLAIM_IDLE_MS, Backoff, Handlers
from timer.handlers.limits import Limit, merged

from .app import warn


class HandlerSpec(click.ParamType):  # type: ignore[type-arg]  # click stubs vary by version
    """``module:attribute``: a function, or a :class:`~timer.handlers.Handlers`."""

    name = "MODULE:FUNCTION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        module_name, sep, attr = value.partition(":")
        if "/" in module_name or "\\" in module_name or module_name.endswith(".py"):
            self.fail(_file_given(module_name, attr or "FUNCTION"))
        if os.getcwd() not in sys.path:  # as `python -m` does: the project you run it in
            sys.path.insert(0, os.getcwd())
        if not sep or not module_name or not attr:
            named = _named_in(module_name) if module_name else None
            self.fail(
                named or f"{quoted(value)} is not MODULE:FUNCTION (e.g. myapp.handlers:on_timeout)"
            )
        try:
            target: Any = pkgutil.resolve_name(value)
        except SystemExit as exc:  # said, not the process ended with no word of why
            code = "" if exc.code is None else quoted(exc.code)
            self.fail(f"importing {module_name} called sys.exit({code}){_where(exc, module_name)}")
        except Exception as exc:
            if isinstance(exc, AttributeError) and module_name in sys.modules:  # imported
                found = _candidates(sys.modules[module_name])
                which = f"; its handlers: {_listed(found)}" if found else ""
                self.fail(f"module {quoted(module_name)} has no attribute {quoted(attr)}{which}")
            self.fail(_import_failed(module_name, exc))
        if not isinstance(target, Handlers) and not callable(target):
            self.fail(f"{value} is a {type(target).__name__}, not a function or a Handlers")
        if ctx is not None:  # as given, for check_takes_outcome to name it
            ctx.meta["tickwheel.spec"] = value
        return target


def check_takes_outcome(spec: Any) -> None:
    """InvalidInput (exit 3) when SPEC is a function one outcome cannot call, or a
    Handlers object with such a handler: said at start-up (``handle os:getcwd`` started,
    then dead-lettered every outcome with a TypeError), naming SPEC as given. A callable
    whose signature cannot be read (some builtins) is let through; None (no SPEC) too."""
    ctx = click.get_current_context(silent=True)
    given = ctx.meta.get("tickwheel.spec", "SPEC") if ctx is not None else "SPEC"
    if isinstance(spec, Handlers):
        for kind in spec.kinds:
            fn = spec.handler(kind)
            why = _not_one_argument(fn)
            if why is not None:
                name = getattr(fn, "__qualname__", None) or repr(fn)
                raise InvalidInput(
                    f"the handler of {kind} outcomes in {given}, {name}, {why}: a handler is "
                    "called with one argument, the outcome (def on_expired(outcome): ...)"
                )
        return
    why = None if spec is None else _not_one_argument(spec)
    if why is not None:
        raise InvalidInput(
            f"handler {given} {why}: a handler is called with one argument, the outcome "
            "(def on_timeout(outcome): ...)"
        )


def _not_one_argument(fn: Any) -> str | None:
    """Why ``fn`` cannot be called with one argument, or None (it can, or its signature
    cannot be read)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(None)
    except TypeError:
        if not signature.parameters:
            return "takes no arguments"
        return f"cannot be called with one argument (its signature: {signature})"
    return None


def _named_in(given: str) -> str | None:
    """What to give for a SPEC with no ``:FUNCTION``, if ``given`` imports: its handlers
    as MODULE:NAME (the one it holds, or a list to choose from), or that it holds none;
    a dotted path to a function (myapp.handlers.on_timeout), the same with a colon."""
    module, _, last = given.rpartition(".")
    for name, attr in ((given, None), (module, last)):
        try:
            imported = importlib.import_module(name) if name else None
        except (Exception, SystemExit):  # said as it was: not MODULE:FUNCTION
            continue
        if imported is None:
            continue
        if attr is not None:  # myapp.handlers.on_timeout: the colon was meant
            target = getattr(imported, attr, None)
            if isinstance(target, Handlers) or _looks_like_handler(target, name):
                return f"{quoted(given)} is not MODULE:FUNCTION: give {name}:{attr}"
            continue
        found = _candidates(imported)
        said = f"{quoted(given)} is a module, not MODULE:FUNCTION"
        if not found:
            return f"{said}, and it defines no handler to name (a function taking an Outcome)"
        if len(found) == 1:
            return f"{said}: give {_listed(found)}, the one handler in it"
        return f"{said}: give one of its handlers, {_listed(found)}"
    return None


def _candidates(module: ModuleType) -> list[tuple[str, str]]:
    """(MODULE:NAME, what it is) for what in ``module`` a SPEC could name: its Handlers
    objects first, then the functions defined in it that take one argument (an Outcome)."""
    names = [n for n in vars(module) if not n.startswith("_")]
    objects = [n for n in names if isinstance(getattr(module, n), Handlers)]
    functions = [n for n in names if _looks_like_handler(getattr(module, n), module.__name__)]
    return [(f"{module.__name__}:{n}", " (a Handlers)") for n in objects] + [
        (f"{module.__name__}:{n}", "") for n in functions
    ]


def _looks_like_handler(value: Any, module: str) -> bool:
    """A function defined in ``module`` (not one it imported) that one Outcome can call."""
    if not inspect.isfunction(value) or value.__module__ != module:
        return False
    try:
        inspect.signature(value).bind(None)
    except (TypeError, ValueError):
        return False
    return True


def _listed(found: list[tuple[str, str]], most: int = 6) -> str:
    """``m:app (a Handlers), m:on_timeout or m:on_cancel``, the first ``most`` of them."""
    said = [spec + what for spec, what in found[:most]]
    if len(found) > most:
        return f"{', '.join(said)} or {len(found) - most} more"
    return said[0] if len(said) == 1 else f"{', '.join(said[:-1])} or {said[-1]}"


def _import_failed(module: str, exc: Exception) -> str:
    """Why ``module`` could not be imported, and where in the user's own code."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if missing and module != missing and not module.startswith(missing + "."):
        # the module is there: something it imports is not (`import nosuchlib` in it)
        return (
            f"module {quoted(module)} was found, but it imports {quoted(missing)}, a module "
            f"that is not installed{_where(exc, module)}"
        )
    why = exc.msg if isinstance(exc, SyntaxError) else str(exc)  # its str repeats the line
    said = (
        f"cannot import module {quoted(module)}: {type(exc).__name__}: {why}{_where(exc, module)}"
    )
    if missing is not None:  # the module itself: looked for from here and on PYTHONPATH
        said += (
            f"; run the command from the directory that holds {quoted(missing.split('.')[0])} "
            "(or set PYTHONPATH to it), with its packages installed in this Python"
        )
    return said


# tickwheel's package and its CLI's (a link to it in a checkout), and the stdlib's
_TICKWHEEL = tuple({os.path.realpath(p) for p in (timer.__path__[0], Path(__file__).parent)})
_STDLIB = tuple({os.path.realpath(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib")})


def _where(exc: BaseException, module: str) -> str:
    """Where the import failed in the user's own code, so it can be found without a
    traceback: `` (at myapp/x.py:12)``, the last frame outside tickwheel, Python's
    standard library and installed packages (a SyntaxError: the line it names); "" if
    no frame is the user's (the module itself is not there)."""
    roots = _own_roots(module)
    places = [(f.filename, f.lineno) for f in traceback.extract_tb(exc.__traceback__)]
    if isinstance(exc, SyntaxError) and exc.filename:  # the file that did not compile
        places.append((exc.filename, exc.lineno))
    own = [(file, line) for file, line in places if line and _is_own(file, roots)]
    if not own:
        return ""
    name = os.path.abspath(own[-1][0])
    with contextlib.suppress(ValueError):
        relative = os.path.relpath(name)
        name = name if relative.startswith("..") else relative
    return f" (at {name}:{own[-1][1]})"


def _own_roots(module: str) -> tuple[str, ...]:
    """Where the user's top-level package (or module) is, installed or not."""
    with contextlib.suppress(Exception):  # not findable: no root
        spec = importlib.util.find_spec(module.partition(".")[0])
        if spec is not None:
            found = list(spec.submodule_search_locations or ()) or [spec.origin or ""]
            return tuple(os.path.realpath(p) for p in found if p)
    return ()


def _is_own(filename: str, roots: tuple[str, ...]) -> bool:
    if filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return False
    path = os.path.realpath(filename)

    def under(*dirs: str) -> bool:
        return any(path == d or path.startswith(d.rstrip(os.sep) + os.sep) for d in dirs)

    if under(*roots) and not under(*_TICKWHEEL):
        return True
    installed = {"site-packages", "dist-packages"} & set(PurePath(path).parts)
    return not installed and not under(*_TICKWHEEL, *_STDLIB)


def _file_given(path: str, attr: str) -> str:
    """What to give instead of a file's path: its module's dotted name, as imported from
    the current directory (the one `handle` puts first on the import path)."""
    file = PurePath(path.replace("\\", "/"))
    if file.suffix == ".py":
        file = file.with_suffix("")
    if file.is_absolute() or ".." in file.parts:
        where = str(PurePath(path).parent)
        return (
            f"{quoted(path)} is a file, not a module: run `tickwheel handle` in {where} and give "
            f"its module path, {file.name}:{attr}"
        )
    parts = [part for part in file.parts if part != "."]
    where = "in" if len(parts) == 1 else "under"
    return (
        f"{quoted(path)} is a file, not a module: give a module path, e.g. "
        f"{'.'.join(parts)}:{attr} (the file {'/'.join(parts)}.py {where} the current directory)"
    )


def handlers_of(
    spec: Any,
    group: str | None,
    consumer: str | None,
    kinds: str,
    max_attempts: int | None,
    backoff_ms: int | None,
    max_backoff_ms: int | None,
    reclaim_idle_ms: int | None,
    timeout_s: float | None,
    limits: tuple[Limit, ...] = (),
    fair_by: str | None = None,
) -> Handlers:
    base = spec.backoff if isinstance(spec, Handlers) else Backoff()
    initial_s = base.initial_s if backoff_ms is None else backoff_ms / 1000
    max_s = base.max_s if max_backoff_ms is None else max_backoff_ms / 1000
    if max_backoff_ms is not None and max_s < initial_s:  # given: never silently raised
        whose = ", the Handlers object's" if isinstance(spec, Handlers) else ", its default"
        raise InvalidInput(
            f"--max-backoff ({format_duration_ms(max_backoff_ms)}) must be at least "
            f"--backoff ({format_duration_ms(round(initial_s * 1000))}"
            f"{'' if backoff_ms is not None else whose})"
        )
    backoff = Backoff(
        initial_s=initial_s,
        multiplier=base.multiplier,
        # --backoff alone past the longest delay not given (5m by default) raises it
        max_s=max(initial_s, max_s),
        jitter=base.jitter,
    )
    if isinstance(spec, Handlers):  # the object's own settings, unless overridden here
        h = Handlers(
            group=group or spec.group,
            consumer=consumer,
            max_attempts=max_attempts or spec.max_attempts,
            backoff=backoff,
            reclaim_idle_ms=spec.reclaim_idle_ms if reclaim_idle_ms is None else reclaim_idle_ms,
            timeout_s=spec.timeout_s if timeout_s is None else timeout_s,
            limits=merged((*spec.limits, *limits)),
            fair_by=fair_by or spec.fair_by,
        )
        for kind in spec.kinds:
            fn = spec.handler(kind)
            assert fn is not None
            own = spec.timeout_of(kind) if timeout_s is None else timeout_s
            h.add(kind, fn, timeout_s=own)
        return h
    wanted = OUTCOMES if kinds.strip() == "all" else tuple(k.strip() for k in kinds.split(","))
    for kind in wanted:
        if kind not in OUTCOMES:  # in the flag's words (the library names its argument)
            near = difflib.get_close_matches(kind, [*OUTCOMES, "all"], n=1)
            meant = f" (did you mean {quoted(near[0])}?)" if near else ""
            raise InvalidInput(
                f"--on takes {', '.join(OUTCOMES)} or all, comma-separated, got "
                f"{quoted(kinds)}{meant}"
            )
    h = Handlers(
        group=group or DEFAULT_GROUP,
        consumer=consumer,
        max_attempts=max_attempts or 5,
        backoff=backoff,
        reclaim_idle_ms=DEFAULT_RECLAIM_IDLE_MS if reclaim_idle_ms is None else reclaim_idle_ms,
        timeout_s=timeout_s,
        limits=limits,
        fair_by=fair_by,
    )
    for kind in wanted:
        h.add(kind, spec)
    return h


def warn_on_ignored(spec: Any) -> None:
    """--on given with a Handlers object: the object says which outcomes it handles (a
    function each), so the flag changes nothing; said, not passed over in silence."""
    if not isinstance(spec, Handlers):
        return
    ctx = click.get_current_context()
    source = ctx.get_parameter_source("kinds")
    if source not in (
        click.core.ParameterSource.COMMANDLINE,
        click.core.ParameterSource.ENVIRONMENT,
    ):
        return
    own = ", ".join(spec.kinds) or "none"
    warn(
        f"--on {ctx.params['kinds']} is ignored: SPEC is a Handlers object, which says "
        f"itself which outcomes it handles ({own}: one function each); add a handler to "
        "it for another outcome, or give a function as SPEC"
    )
