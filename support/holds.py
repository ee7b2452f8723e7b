"""Holds as the tests read and place them: the store's holds, and a breaker's hold put there."""

from __future__ import annotations

from celery import Celery

import celery_pause
from celery_pause.model.outcome import Outcome
from celery_pause.model.scope import Scope
from celery_pause.model.state import Hold, PauseState
from celery_pause.stores import store_for


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
