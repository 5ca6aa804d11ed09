"""Each error class declares once how every door reports it (#41): the CLI's exit code
and the HTTP API's status, read by the CLI, the HTTP API and the dashboard; `NotDurable`
was in no table (exit 1, HTTP 500)."""

from __future__ import annotations

import inspect
import json

import pytest

from timer import errors
from timer.cli.app import TimerCommandError
from timer.cli.main import EPILOG
from timer.dashboard.inputs import answer as dashboard_error
from timer.httpapi.context import error_of

KINDS = [
    c
    for _, c in inspect.getmembers(errors, inspect.isclass)
    if issubclass(c, errors.TimerError) and c is not errors.TimerError
]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_every_error_has_its_code_and_status_and_both_doors_use_them(
    kind: type[errors.TimerError],
) -> None:
    exc = kind.__new__(kind)
    Exception.__init__(exc, "what went wrong")
    assert kind.exit_code != 1, f"{kind.__name__} has no exit code of its own"
    assert 400 <= kind.http_status < 600 and kind.http_status != 500
    assert f"{kind.exit_code} " in " ".join(EPILOG.split()), "tickwheel --help lists it"
    assert TimerCommandError(exc).exit_code == kind.exit_code
    status, body = error_of(exc)
    assert (status, body["exit_code"], body["kind"]) == (
        kind.http_status,
        kind.exit_code,
        kind.__name__,
    )
    answer = dashboard_error(exc)  # the dashboard's API says it alike (it had a table)
    assert answer.status_code == kind.http_status
    assert json.loads(bytes(answer.body))["exit_code"] == kind.exit_code


def test_not_durable_is_a_retry_not_an_unknown_failure() -> None:
    assert (errors.NotDurable.exit_code, errors.NotDurable.http_status) == (12, 503)
    assert issubclass(errors.TimerNotFound, errors.NotFound)
    assert errors.TimerNotFound.exit_code == errors.NotFound.exit_code == 6


def test_one_wording_of_an_unknown_field_for_every_door() -> None:
    """The dashboard, the HTTP API and a schedule's keywords say an unknown field alike:
    each extra named, what is taken, the nearest only when one field alone is close."""
    fields = ("delay_ms", "deadline_ms")
    assert errors.unknown_field({"delay_ms": 1}, fields, "this") is None
    one = errors.unknown_field({"dealy_ms": 1}, fields, "a reschedule")
    assert one == (
        'unknown field "dealy_ms": a reschedule takes delay_ms, deadline_ms; '
        'did you mean "delay_ms"?'
    )
    two = errors.unknown_field(["dealy_ms", "x"], fields, "this")
    assert two == 'unknown field "dealy_ms", "x": this takes delay_ms, deadline_ms'
    assert errors.unknown_field(["x"], (), "a drop") == 'unknown field "x": a drop takes no field'
