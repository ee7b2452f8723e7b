"""An app whose worker runs in the test's own process: the memory broker and the memory
store (``memory://`` both), Celery's ``start_worker``, and tasks that record their start and
end in a list of this process.

The in-process counterpart of :mod:`support.harness`, with no server and no subprocess. Each
:class:`Proj` has a name, queues, a store prefix and a control exchange of its own, so no test
sees another's messages or pause state.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from celery import Celery
from celery.contrib.testing.worker import TestWorkController, start_worker

import celery_pause
from celery_pause import WorkerReport
from celery_pause.stores import store_for
from celery_pause.stores.memory import forget_all
from support.polling import wait_for

RECORD = "inprocess.record"
OTHER = "inprocess.record_other"
"""A second task type that records the same way, for pauses of one task type."""
LABELS = {"tenant": "tenant_id"}
"""``pause_labels``: the ``tenant`` label, carried by the keyword argument ``tenant_id``."""
POLL = 0.2
"""``pause_poll_interval``: how often the worker reads the store."""
BROKER_POLL = 0.05
"""Seconds between two looks of the memory broker's consumer at its queues."""
DEADLINE = 20.0
"""Seconds any wait may take. A change reaches an idle in-process worker within Celery's
consumer loop cycle (``drain_events(timeout=2.0)`` on the memory broker), so the waits
here take a second or two, far below this."""

Record = dict[str, Any]


class Proj:
    """A fresh app with the pause step and two recording tasks, and what they recorded."""

    def __init__(self, name: str) -> None:
        self.namespace = f"{name}-{uuid.uuid4().hex[:8]}"
        app = Celery(self.namespace, set_as_current=False)
        app.conf.update(
            broker_url="memory://",
            result_backend="cache+memory://",
            broker_transport_options={"polling_interval": BROKER_POLL},
            pause_store_url="memory://",
            pause_key_prefix=f"inprocess:{self.namespace}",
            pause_poll_interval=POLL,
            pause_labels=LABELS,
            task_default_queue=self.queue(),
            control_exchange=f"ctl-{self.namespace}",
            event_exchange=f"ev-{self.namespace}",
            worker_hijack_root_logger=False,
            worker_timer_precision=0.1,  # the worker's timer thread stops within 0.1 s
        )
        app.steps["consumer"].add(celery_pause.PauseStep)
        self.app = app
        self._lock = threading.Lock()
        self._starts: list[Record] = []
        self._ends: dict[str, float] = {}

        def record(task: Any, tag: str, duration: float = 0.0, **labels: Any) -> str:
            """Record this task's start (id, name, tag, queue, time and labels), work for
            ``duration`` seconds, then record its end."""
            entry = {
                "id": task.request.id,
                "task": task.name,
                "tag": tag,
                "queue": (task.request.delivery_info or {}).get("routing_key"),
                "started": time.time(),
                "labels": labels,
            }
            with self._lock:
                self._starts.append(entry)
            time.sleep(duration)
            with self._lock:
                self._ends[task.request.id] = time.time()
            return tag

        for task_name in (RECORD, OTHER):
            app.task(name=task_name, bind=True, shared=False)(record)

    def queue(self, name: str = "default") -> str:
        """The name of this app's queue ``name``."""
        return f"{self.namespace}.{name}"

    @contextmanager
    def worker(
        self, *, queues: Sequence[str] | None = None, pool: str = "solo", concurrency: int = 1
    ) -> Iterator[TestWorkController]:
        """A worker of this app in a thread of this process, for as long as the block runs,
        yielded once it has applied the store's current state."""
        with start_worker(
            self.app,
            pool=pool,
            concurrency=concurrency,
            perform_ping_check=False,
            queues=list(queues or [self.queue()]),
            shutdown_timeout=30.0,
        ) as running:
            self.wait_applied(running.hostname)
            yield running

    def report(self, hostname: str) -> WorkerReport | None:
        """What ``hostname`` last reported to the store (``None`` before its first report)."""
        reports = store_for(self.app).worker_reports()
        return next((r for r in reports if r.hostname == hostname), None)

    def wait_applied(self, hostname: str, generation: int | None = None) -> WorkerReport:
        """``hostname``'s report, once it applied ``generation`` (the store's current one)."""
        wanted = store_for(self.app).read().state.generation if generation is None else generation

        def applied() -> WorkerReport | None:
            report = self.report(hostname)
            done = report and report.status == "applied" and report.generation >= wanted
            return report if done else None

        report = wait_for(applied, timeout=DEADLINE, what=f"{hostname} to apply {wanted}")
        assert report is not None
        return report

    def wait_held(self, hostname: str, count: int) -> None:
        """Wait until ``hostname``'s gate holds ``count`` tasks."""

        def holding() -> bool:
            report = self.report(hostname)
            return report is not None and report.held == count

        wait_for(holding, timeout=DEADLINE, what=f"{count} tasks held on {hostname}")

    def in_broker(self, queue: str | None = None) -> int:
        """How many messages wait in the broker's ``queue`` (the default queue by default)."""
        with self.app.connection() as conn:
            declared = conn.default_channel.queue_declare(queue or self.queue(), passive=True)
            return int(declared.message_count)

    def wait_waiting(self, hostname: str, count: int) -> None:
        """Wait until ``count`` tasks of the default queue wait: held in ``hostname``'s gate
        or not fetched yet (a pause of every queue stops the worker fetching them)."""

        def waiting() -> bool:
            report = self.report(hostname)
            return report is not None and report.held + self.in_broker() == count

        wait_for(waiting, timeout=DEADLINE, what=f"{count} tasks waiting for {hostname}")

    def send(
        self,
        tag: str,
        duration: float = 0.0,
        *,
        task: str = RECORD,
        queue: str | None = None,
        tenant: str | None = None,
    ) -> str:
        """Send one recording task (its ``tenant`` label when given); return its id."""
        kwargs = {"tenant_id": tenant} if tenant is not None else {}
        result = self.app.send_task(
            task, args=(tag, duration), kwargs=kwargs, queue=queue or self.queue()
        )
        return str(result.id)

    def records(self, where: Callable[[Record], bool] = lambda r: True) -> list[Record]:
        """The starts recorded so far, in order; those ``where`` accepts."""
        with self._lock:
            return [r for r in self._starts if where(r)]

    def wait_records(
        self,
        count: int,
        where: Callable[[Record], bool] = lambda r: True,
        *,
        timeout: float = DEADLINE,
    ) -> list[Record]:
        """The starts ``where`` accepts, once there are ``count`` of them."""

        def enough() -> list[Record] | None:
            records = self.records(where)
            return records if len(records) >= count else None

        records = wait_for(enough, timeout=timeout, what=f"{count} task starts")
        assert records is not None
        return records

    def spans(self, records: Sequence[Record]) -> list[tuple[float, float]]:
        """The start and end of each of ``records``, once every one of them ended."""

        def ended() -> list[tuple[float, float]] | None:
            with self._lock:
                if not all(r["id"] in self._ends for r in records):
                    return None
                return [(r["started"], self._ends[r["id"]]) for r in records]

        spans = wait_for(ended, timeout=DEADLINE, what=f"{len(records)} tasks to end")
        assert spans is not None
        return spans

    def stays_quiet(self, where: Callable[[Record], bool], seconds: float) -> None:
        """Watch for ``seconds``: fail at the first start that ``where`` accepts."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = self.records(where)
            assert not started, f"tasks started that should be held: {started}"
            time.sleep(0.02)

    def close(self) -> None:
        store_for(self.app).close()
        forget_all()


def ids(records: Sequence[Record]) -> list[str]:
    """The task ids of ``records``, sorted: equal to the sorted ids sent if each ran once."""
    return sorted(r["id"] for r in records)


def most_at_once(spans: Sequence[tuple[float, float]]) -> int:
    """The most of ``spans`` (each a start and an end) that overlap at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def most_within(starts: Sequence[float], seconds: float) -> int:
    """The most of ``starts`` in any window of ``seconds`` (each window opening at a start)."""
    ordered = sorted(starts)
    return max(
        (sum(1 for t in ordered[i:] if t < begin + seconds) for i, begin in enumerate(ordered)),
        default=0,
    )
