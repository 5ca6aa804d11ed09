"""Settling what a handler run ends with (a part of ``Handlers.run``, beside its loop in
``loop.py``): a handled outcome is acknowledged by the ``handler-acks`` thread
in batches (one XACK per stream for many ids: one round trip per outcome was the
runner's bottleneck under a backlog); a failure is retried later or, past the last
attempt, dead-lettered. Each settling call is tried again on a Redis error (a failover
takes a moment), and frees the outcome's place in hand once it is done.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..durable.groups.streams import Delivery
from ..durable.model.models import Outcome
from ..errors import TimerError
from .policy import InHand, Later, Registry, Retry, error_text

if TYPE_CHECKING:
    from ..client.consumer import ConsumerGroup

log = logging.getLogger("tickwheel.handlers")

# An acknowledgement that failed, or that the client's durability did not confirm (a
# failover may lose it, and its outcome would come again) is sent again this often while
# the runner runs, the outcome kept in hand meanwhile; the warning is said at most this
# often.
ACK_AGAIN_S = 0.5
ACK_SAY_EVERY_S = 10.0


class Settler:
    """Acknowledges, retries and dead-letters the deliveries of one run."""

    def __init__(
        self,
        h: Registry,
        hand: InHand,
        group: ConsumerGroup,
        fields: Callable[[Outcome | None], dict[str, object]],
        *,
        inline: bool = False,
    ) -> None:
        self.inline = inline  # no acker thread: each outcome acknowledged as settled
        self.h = h
        self.hand = hand
        self.group = group
        self.fields = fields  # a log record's structured fields (HandlerLoop._fields)
        self.acks: queue.SimpleQueue[Delivery | None] = queue.SimpleQueue()
        self._said_again_at = 0.0
        self.time = group.time
        self.acker: threading.Thread | None = None

    def start(self) -> None:
        if self.inline:
            return
        self.acker = self.time.thread(self._acker_main, name="handler-acks")
        self.acker.start()

    def stop(self) -> None:
        """The acker acknowledges what it was given, then ends."""
        self.acks.put(None)

    def settle(self, d: Delivery, exc: BaseException | None, started: float) -> None:
        """Acknowledge, schedule a retry or dead-letter; then free the slot."""
        h, o = self.h, d.outcome
        h.stats.duration.observe((self.time.monotonic() - started) * 1000)
        if exc is None:
            if self.inline:  # one not confirmed comes again (claimed), as at a stop
                self._ack([d], first=True, last=True)
                return
            self.acks.put(d)  # still in hand (and touched) until the acker has acked it
            return
        try:
            if isinstance(exc, Later) and o.attempt < h.max_attempts:
                log.debug(
                    "%s %s (attempt %d/%d): %s",
                    o.outcome,
                    o.id,
                    o.attempt,
                    h.max_attempts,
                    exc,
                    extra=self.fields(o),
                )
                self.with_retries(lambda: self.group.retry(d, round(exc.delay_s * 1000)))
                h.stats.later += 1
                return
            h.stats.failed += 1
            if o.attempt >= h.max_attempts:
                self.settle_dead(d, error_text(exc), forget=False)
            else:
                delay = exc.delay_s if isinstance(exc, Retry) else None
                if delay is None:
                    delay = h.backoff.delay_s(o.attempt)
                log.info(
                    "%s %s (attempt %d/%d) failed: %s; retrying in %.3gs",
                    o.outcome,
                    o.id,
                    o.attempt,
                    h.max_attempts,
                    exc,
                    delay,
                    extra=self.fields(o),
                )
                said = error_text(exc)
                self.with_retries(lambda: self.group.retry(d, round(delay * 1000), said))
                h.stats.retried += 1
        except TimerError as err:
            h.stats.ack_errors += 1
            log.error(
                "could not settle %s %s (%s); it will come again",
                o.outcome,
                o.id,
                err,
                extra=self.fields(o),
            )
        finally:
            self.forget(d)

    def _acker_main(self) -> None:
        again: list[Delivery] = []  # acknowledged, not confirmed: in hand, sent again
        again_at = 0.0  # when they are sent again (new acks arriving do not hasten it)
        stop = False
        while not stop:
            batch: list[Delivery] = []
            wait_s = max(0.0, again_at - self.time.monotonic()) if again else None
            try:
                d = self.acks.get(timeout=wait_s)
            except queue.Empty:  # nothing new: time to send the others again
                pass
            else:
                if d is None:
                    stop = True
                else:
                    batch.append(d)
            while not stop and len(batch) < 1000:
                try:
                    nxt = self.acks.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            if again and (stop or self.time.monotonic() >= again_at):
                again = self._ack(again, first=False, last=stop)
                again_at = self.time.monotonic() + ACK_AGAIN_S
            if batch:
                held = self._ack(batch, first=True, last=stop)
                if held and not again:
                    again_at = self.time.monotonic() + ACK_AGAIN_S
                again += held

    def _ack(self, batch: list[Delivery], *, first: bool, last: bool) -> list[Delivery]:
        """Acknowledge a batch; those to send again (an error, or not durable as the
        client asks: still in hand, touched, so no other consumer takes them meanwhile),
        unless ``last`` (the runner stops: they will come again)."""
        h = self.h
        try:
            unmatched = self.with_retries(functools.partial(self.group.ack_many, batch))
        except TimerError as err:
            if not last:
                now = self.time.monotonic()
                if now >= self._said_again_at:
                    self._said_again_at = now + ACK_SAY_EVERY_S
                    log.warning(
                        "could not acknowledge %d outcomes (%s); holding them and trying again",
                        len(batch),
                        err,
                    )
                return batch
            h.stats.ack_errors += len(batch)
            log.error(
                "could not acknowledge %d outcomes (%s); they will come again", len(batch), err
            )
            for x in batch:
                self.forget(x)
            return []
        h.stats.handled += len(batch)
        if unmatched and first:  # sent again: acknowledged by the try before
            h.stats.acks_unmatched += unmatched
            log.warning(
                "%d of %d acknowledgements found no outcome pending: another consumer "
                "took them over (and may have run them too), or they reached a server "
                "that is not their shard's master (they will come again)",
                unmatched,
                len(batch),
            )
        for x in batch:
            kind = x.outcome.outcome
            h.stats.by_outcome[kind] = h.stats.by_outcome.get(kind, 0) + 1
            self.forget(x)
        return []

    def settle_dead(self, d: Delivery, error: str, forget: bool = True) -> None:
        o = d.outcome
        tries: list[TimerError] = []  # of this call that raised (a reply lost, or WAIT short)

        def once() -> str | None:
            try:
                return self.group.dead_letter(d, error)
            except TimerError as err:
                tries.append(err)
                raise

        try:
            ref = self.with_retries(once)
            # Nothing pending when tried again after a try that raised: that try wrote the
            # dead letter (dead.lua writes it and acknowledges in one step) and only its
            # reply, or the durability wait after it, was lost; as an acknowledgement sent
            # again counts as handled, it counts as dead-lettered.
            if ref is not None or tries:
                self.h.stats.dead_lettered += 1
                log.error(
                    "%s %s failed %s; dead letter %s: %s",
                    o.outcome,
                    o.id,
                    "its only attempt" if o.attempt == 1 else f"{o.attempt} attempts",
                    ref
                    if ref is not None
                    else f"written by a try whose reply was lost ({tries[0]})",
                    error.splitlines()[0] if error else "",
                    extra=self.fields(o),
                )
        except TimerError as err:
            self.h.stats.ack_errors += 1
            log.error(
                "could not dead-letter %s (%s); it will come again", o.id, err, extra=self.fields(o)
            )
        finally:
            if forget:
                self.forget(d)

    def with_retries(self, fn: Callable[[], Any], attempts: int = 3) -> Any:
        """A settling call, tried again on a Redis error (a failover takes a moment)."""
        for i in range(attempts):
            try:
                return fn()
            except TimerError:
                if i == attempts - 1:
                    raise
                self.time.sleep(0.2 * (i + 1))  # backoff between tries of a failed call
        return None

    def forget(self, d: Delivery) -> None:
        with self.hand.cond:
            self.hand.held.pop((d.outcome.shard, d.entry_id), None)
            self.hand.cond.notify_all()
