"""One trace from schedule to fire to handler (timer/tracing.py), recorded with the
OpenTelemetry SDK's in-memory exporter, on the real server with a real worker."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.integration.conftest import namespace_keys
from timer import Handlers, InvalidInput, Outcome, TimerClient, tracing
from timer.worker import Worker, WorkerSettings

otel = pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider (set once: OpenTelemetry allows one), cleared."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


def run_worker(c: TimerClient) -> tuple[Worker, threading.Thread]:
    w = Worker(TimerClient.from_url(c.where, c.namespace), WorkerSettings(worker_id="tw"))
    t = threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
    t.start()
    return w, t


def test_schedule_fire_and_handler_in_one_trace(
    client: TimerClient, spans: InMemorySpanExporter
) -> None:
    """A timer scheduled inside a span keeps its trace context: the worker's fire span
    (deadline → decision) and the handler's span are in the same trace, children of the
    span that scheduled it; a timer scheduled without one records neither."""
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("submit job 42") as parent:
        tp = tracing.current()
        assert tp is not None
        client.schedule("job:{42}", 200, payload={"job": 42}, traceparent=tp)
        client.schedule_many([{"id": "job:{43}", "delay_ms": 250, "traceparent": tp}])
    client.schedule("untraced", 200)
    info = client.get("job:{42}")
    assert info is not None and info.traceparent == tp
    w, t = run_worker(client)
    try:
        for tid in ("job:{42}", "job:{43}", "untraced"):
            assert client.wait(tid, timeout=20).outcome == "expired"
    finally:
        w.stop()
        t.join(15)
        w.client.close()
    seen: list[Outcome] = []
    handlers = Handlers(client, group="traced")
    handlers.add("expired", seen.append)
    assert handlers.run(stop_when_idle=True)
    assert {o.id: o.traceparent for o in seen} == {"job:{42}": tp, "job:{43}": tp, "untraced": None}
    trace_id = parent.get_span_context().trace_id
    mine = [s for s in spans.get_finished_spans() if s.context.trace_id == trace_id]
    by_name: dict[str, list[Any]] = {}
    for s in mine:
        by_name.setdefault(s.name, []).append(s)
    fires = {s.attributes["tickwheel.timer_id"]: s for s in by_name["tickwheel.fire"]}
    handles = {s.attributes["tickwheel.timer_id"]: s for s in by_name["tickwheel.handle"]}
    assert set(fires) == set(handles) == {"job:{42}", "job:{43}"}
    for s in (*fires.values(), *handles.values()):
        assert s.parent is not None and s.parent.span_id == parent.get_span_context().span_id
    fire = fires["job:{42}"]
    assert fire.attributes["tickwheel.worker"] == "tw" and fire.end_time >= fire.start_time
    assert handles["job:{42}"].start_time >= fire.end_time - 5_000_000  # after the fire (5 ms)
    about = [(s.attributes or {}).get("tickwheel.timer_id") for s in spans.get_finished_spans()]
    assert "untraced" not in about


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "00-abc",
        42,
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ],
)
def test_a_bad_traceparent_is_refused_and_writes_nothing(
    client: TimerClient, redis_client: redis.Redis, bad: object
) -> None:
    before = namespace_keys(redis_client, client.namespace)
    with pytest.raises(InvalidInput, match="traceparent"):
        client.schedule("t", 1000, traceparent=bad)  # type: ignore[arg-type]
    [res] = client.schedule_many([{"id": "t", "delay_ms": 1000, "traceparent": bad}])
    assert isinstance(res, InvalidInput)
    assert namespace_keys(redis_client, client.namespace) == before


def test_the_trace_survives_notify_reschedule_and_sweep(
    client: TimerClient, spans: InMemorySpanExporter
) -> None:
    """A traced record rewritten by notify (one of two keys) and reschedule keeps its trace
    context; a timer that is past due when the worker starts is decided by the sweep or
    the wheel, and its fire span is recorded either way."""
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    client.schedule("k:{1}", 60_000, watch=["k:{1}:a", "k:{1}:b"], need=2, traceparent=tp)
    other = "00-11111111111111111111111111111111-2222222222222222-01"
    again = client.schedule(
        "k:{1}", 60_000, watch=["k:{1}:a", "k:{1}:b"], need=2, traceparent=other
    )  # another trace: still the same timer
    assert not again.created
    assert client.notify("k:{1}:a") == 0
    assert client.reschedule("k:{1}", 100) is not None
    info = client.get("k:{1}")
    assert info is not None and info.traceparent == tp and info.got == ("k:{1}:a",)
    w, t = run_worker(client)
    try:
        assert client.wait("k:{1}", timeout=20).outcome == "expired"
    finally:
        w.stop()
        t.join(15)
        w.client.close()
    fired = [s for s in spans.get_finished_spans() if s.name == "tickwheel.fire"]
    assert [(s.attributes or {}).get("tickwheel.timer_id") for s in fired] == ["k:{1}"]
    assert format(fired[0].context.trace_id, "032x") == tp.split("-")[1]
