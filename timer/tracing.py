"""OpenTelemetry: one trace from a timer's schedule to its fire and its handler run.

A timer scheduled with ``traceparent=tracing.current()`` (the active span's W3C trace
context) keeps it in its record and its outcome. The worker that fires it records a
``tickwheel.fire`` span in that trace (from the deadline to the decision, Redis time),
and ``Handlers`` runs the handler inside a ``tickwheel.handle`` span whose parent is the
same context: schedule → fire → handler in one trace.

OpenTelemetry is optional (``pip install '.[otel]'`` from the checkout): without it ``current()``
is None and nothing is recorded; with the API but no SDK configured the spans are
no-ops. This module imports it lazily and only here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

TRACER = "tickwheel"


def _otel() -> Any:
    try:
        from opentelemetry import trace  # noqa: PLC0415 - optional
        from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
            TraceContextTextMapPropagator,
        )
    except ImportError:
        return None
    return trace, TraceContextTextMapPropagator()


def current() -> str | None:
    """The active span's W3C ``traceparent``, or None (no OpenTelemetry, no valid span)."""
    otel = _otel()
    if otel is None:
        return None
    carrier: dict[str, str] = {}
    otel[1].inject(carrier)
    return carrier.get("traceparent")


def _context(traceparent: str) -> Any:
    otel = _otel()
    return None if otel is None else otel[1].extract({"traceparent": traceparent})


def record_span(
    name: str, traceparent: str, start_ms: int, end_ms: int, attributes: Mapping[str, Any]
) -> None:
    """A finished span ``name`` in the trace of ``traceparent``, from ``start_ms`` to
    ``end_ms`` (epoch ms): what the worker records for a fire it already made."""
    otel = _otel()
    if otel is None:
        return
    tracer = otel[0].get_tracer(TRACER)
    span = tracer.start_span(
        name,
        context=_context(traceparent),
        start_time=start_ms * 1_000_000,
        attributes=dict(attributes),
    )
    span.end(end_time=max(start_ms, end_ms) * 1_000_000)


@contextlib.contextmanager
def span(name: str, traceparent: str | None, attributes: Mapping[str, Any]) -> Iterator[None]:
    """Run the block in a span ``name`` whose parent is ``traceparent`` (a no-op without
    one or without OpenTelemetry); an exception is recorded on the span and re-raised."""
    otel = _otel() if traceparent else None
    if otel is None:
        yield
        return
    tracer = otel[0].get_tracer(TRACER)
    assert traceparent is not None
    with tracer.start_as_current_span(
        name, context=_context(traceparent), attributes=dict(attributes)
    ):
        yield
