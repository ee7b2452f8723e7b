"""Holds as the tests read and place them: the store's holds, a breaker's hold put there,
a state a worker restored after the store forgot it, and the curves of ramped resumes."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass

from celery import Celery

import celery_pause
from celery_pause import cli
from celery_pause.errors import StoreError
from celery_pause.model.limit import Limit
from celery_pause.model.outcome import Outcome
from celery_pause.model.scope import Scope
from celery_pause.model.state import Hold, PauseState
from celery_pause.stores import store_for

from .cli import invoke
from .harness import Cluster, wait_for


def holds(app: Celery) -> tuple[Hold, ...]:
    """The holds in ``app``'s store, as :func:`celery_pause.status` reads them."""
    return celery_pause.status(app).holds


def add_breaker_hold(
    app: Celery,
    queues: list[str] | None = None,
    *,
    source: str = "breaker:payments",
    reason: str | None = None,
) -> None:
    """Write a breaker's hold on ``queues`` (every queue for ``None``) straight to the store,
    as an open breaker does, beside the holds in force."""

    def add(state: PauseState, now: float) -> Outcome[PauseState, None]:
        hold = Hold(scope=Scope.of(queues), source=source, reason=reason, paused_at=now)
        return Outcome(state.with_holds([*state.live_holds(now), hold]), None)

    store_for(app).update(add)


def wait_restored(cluster: Cluster, *holds: Hold, by: str, lost: str) -> PauseState:
    """Wait until worker ``by`` wrote ``holds`` back after the store forgot them (``lost``:
    what the store held); check they are exactly as placed, the history's ``restore`` entry
    and the line ``pause status`` shows for it. Returns the state restored."""

    def restored() -> PauseState | None:
        with suppress(StoreError):
            state = store_for(cluster.app).read().state
            return state if state.restored is not None else None
        return None

    state = wait_for(restored, timeout=30, what="a worker to restore the state")
    assert state is not None and state.restored is not None
    assert state.holds == holds, "the holds restored are not those placed"
    assert (state.restored.by, state.restored.lost) == (by, lost)
    # The worker records the restore right after it wrote it
    entries = wait_for(
        lambda: [e for e in celery_pause.history(cluster.app) if e.action == "restore"],
        timeout=10,
        what="the restore entry in the history",
    )
    assert [(e.by, e.reason, e.holds) for e in entries] == [(by, lost, tuple(h.id for h in holds))]
    output = invoke(cluster.app, cli.pause, "status").output
    assert f"Restored by {by} at " in output and f": {lost}\n" in output, output
    return state


@dataclass(frozen=True)
class Curve:
    """A ramped resume as the tests measure it: its rising rate's figures."""

    hold: Hold

    @property
    def limit(self) -> Limit:
        assert self.hold.limit is not None and self.hold.limit.rise is not None
        return self.hold.limit

    @property
    def start(self) -> float:
        return (self.limit.rise or (0.0, 0.0))[0]

    @property
    def duration(self) -> float:
        return (self.limit.rise or (0.0, 0.0))[1]

    @property
    def end(self) -> float:
        return self.start + self.duration

    @property
    def peak(self) -> float:
        return self.limit.rate or 0.0

    def rate(self, at: float) -> float:
        return self.limit.rate_at(at)

    def allowance(self, at: float) -> float:
        """How many starts the ramp allows the cluster from its start to ``at``."""
        return self.peak * self.duration * self.limit.progress(at) ** 2 / 2


def ramps(app: Celery, source: str | None = None) -> tuple[Curve, ...]:
    """The ramped resumes in force in ``app``'s store (of ``source``, if given)."""
    read = store_for(app).read()
    live = read.state.live_ramps(read.now)
    return tuple(Curve(h) for h in live if source is None or h.source == source)


def curve(start: float, duration: float, peak: float) -> Curve:
    """The curve of a ramp rising to ``peak`` over ``duration`` seconds from ``start``."""
    limit = Limit(rate=peak, rise=(start, duration))
    return Curve(Hold(scope=Scope(frozenset()), limit=limit))
