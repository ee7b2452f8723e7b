"""What a worker shows of its pause (probes, metrics, warnings) is decided in store time:
a step of its wall clock leaves a hold with an auto-resume in place (pure logic: a real
gate, no consumer; the wall clock stepped by replacing ``time.time``)."""

from __future__ import annotations

import time

import pytest

from celery_pause.model.scope import Scope
from celery_pause.model.state import Hold, PauseState
from celery_pause.monitor.step import Monitor
from celery_pause.settings import PauseConfig
from celery_pause.worker.gate import Gate
from celery_pause.worker.pools import PoolSupport
from celery_pause.worker.state import StoreClock, WorkerState

HOST = "w1@host"


@pytest.mark.parametrize("step", [3600.0, -3600.0])
def test_a_wall_clock_step_changes_nothing_the_worker_shows(
    step: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a worker that applied a hold of queue a, auto-resuming in ten minutes
    clock = StoreClock()
    gate = Gate(lambda req: None, lambda req: req.queue, hostname=HOST, clock=clock.now)
    state = WorkerState(
        hostname=HOST, pool=PoolSupport("prefork", greenlets=False), gate=gate, clock=clock
    )
    store_now = time.time()
    hold = Hold(scope=Scope.of(["a"]), paused_at=store_now - 60, resume_at=store_now + 600)
    paused = PauseState().with_holds([hold])
    state.mark_applied(state.starts_with(paused, store_now), as_of=store_now)
    config = PauseConfig(
        store_url="memory://",
        key_prefix="p",
        poll_interval=1,
        max_hold=60,
        worker_ttl=10,
        store_timeout=1,
    )
    monitor = Monitor(consumer=object(), config=config, state=state)  # type: ignore[arg-type]
    try:
        before = monitor.view()

        # When the worker's wall clock steps by an hour
        wall = time.time
        monkeypatch.setattr(time, "time", lambda: wall() + step)
        after = monitor.view()

        # Then it still shows the hold, paused for as long as before
        assert before.holds == after.holds == (hold,)
        assert abs(after.paused_seconds - before.paused_seconds) < 1.0
    finally:
        monitor.close()
