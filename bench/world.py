"""The benchmark's private world: its own Redis servers, real worker processes, task records.

Two private ``redis-server`` processes on free loopback ports: one is the broker (and
holds the task records), the other only the pause store, so the store's command
counters see the workers' store traffic and nothing else. Workers are real
``celery worker`` processes (prefork unless told otherwise) running the test app
``support.proj``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import celery
import kombu
import redis
from celery import Celery

from celery_pause.errors import PauseError
from celery_pause.stores import store_for
from support.harness import ROOT, Worker, stop_all, wait_for
from support.processes import raise_on_sigterm
from support.proj import RECORD_TASK, make_app
from support.redis_server import RedisServer

RECORDS_DB = 1


@dataclass(frozen=True)
class Start:
    """One task start, as the task recorded it."""

    worker: str
    queue: str
    started: float


class World:
    """Private servers, an app bound to them, and the workers started so far."""

    def __init__(self, *, poll_interval: float, **conf: Any) -> None:
        self.namespace = "bench" + uuid.uuid4().hex[:8]
        self.tmp = Path(tempfile.mkdtemp(prefix="celery-pause-bench-"))
        self.poll_interval = poll_interval
        self.conf = conf
        self._servers = ExitStack()
        self.broker = self._servers.enter_context(RedisServer())
        self.store = self._servers.enter_context(RedisServer())
        self.app: Celery = self._app(install=True)
        self.records = self.broker.client(RECORDS_DB)
        self.broker_client = self.broker.client(0)
        self.store_client = self.store.client(0)
        self.record_key = f"celery-pause-test:{self.namespace}:records"
        self.workers: list[Worker] = []
        self._read = 0

    def _app(self, *, install: bool) -> Celery:
        os.environ["PAUSE_TEST_RECORDS"] = self.broker.url(RECORDS_DB)
        return make_app(
            namespace=self.namespace,
            broker=self.broker.url(0),
            store=self.store.url(0),
            poll_interval=self.poll_interval,
            install=install,
            **self.conf,
        )

    def queue(self, name: str) -> str:
        return f"{self.namespace}.{name}"

    # -- workers --------------------------------------------------------------------------
    def start_workers(
        self,
        names: Iterable[str],
        *,
        queue: str,
        concurrency: int = 1,
        pool: str = "prefork",
        install: bool = True,
        prefix: Sequence[str] = (),
        timeout: float = 120,
    ) -> list[Worker]:
        """Start one worker per name on ``queue`` and wait until each answers a ping.

        ``prefix`` is a command to run each worker under (``valgrind ...``)."""
        env = {
            **os.environ,
            "PAUSE_TEST_NAMESPACE": self.namespace,
            "PAUSE_TEST_BROKER": self.broker.url(0),
            "PAUSE_TEST_STORE": self.store.url(0),
            "PAUSE_TEST_POLL": str(self.poll_interval),
            "PAUSE_TEST_EXTRA": json.dumps(self.conf),
            "PAUSE_TEST_RECORDS": self.broker.url(RECORDS_DB),
            "PAUSE_TEST_INSTALL": "1" if install else "0",
            "PYTHONPATH": str(ROOT),
        }
        args = ["-P", pool, "-c", str(concurrency), "-Q", queue]
        started = [Worker(self, name, args, env, prefix).start() for name in names]  # type: ignore[arg-type]
        self.workers += started
        for worker in started:
            wait_for(lambda w=worker: self._answers(w), timeout=timeout, what=f"{worker.hostname}")
            if install:
                worker.wait_applied(timeout=timeout / 2)
        return started

    def _answers(self, worker: Worker) -> bool:
        worker.check_alive()
        replies = self.app.control.ping([worker.hostname], timeout=0.5) or []
        return any(worker.hostname in reply for reply in replies)

    def stop_workers(self, workers: Iterable[Worker]) -> None:
        """Stop ``workers`` (at once: warm shutdown, SIGKILL after 20 s)."""
        stopping = list(workers)
        stop_all(stopping)
        self._deregister_killed(stopping)
        for worker in stopping:
            self.workers.remove(worker)

    def _deregister_killed(self, workers: Iterable[Worker]) -> None:
        """Remove the reports of the workers whose warm shutdown was cut short (SIGKILL), as
        that shutdown would have. Known dead, they would otherwise stay lost workers until
        ``pause_forget_worker_after``, and every wait meanwhile would count them only
        ``pause_lease`` into it (a loaded machine's runs slowed, not failed)."""
        killed = [
            w.hostname
            for w in workers
            if w.proc is not None and w.proc.returncode == -signal.SIGKILL
        ]
        if not killed:
            return
        try:
            store = store_for(self.app)
            for hostname in killed:
                store.remove_worker(hostname)
        except PauseError as exc:  # never in the way of stopping the rest (a run cut short)
            log(f"warm shutdown cut short (SIGKILL): {', '.join(killed)}; not removed: {exc}")
            return
        log(f"warm shutdown cut short (SIGKILL), report removed: {', '.join(killed)}")

    # -- tasks and their records ----------------------------------------------------------
    def send(self, queue: str, count: int, duration: float = 0.0) -> None:
        with self.app.producer_or_acquire() as producer:
            for _ in range(count):
                self.app.send_task(
                    RECORD_TASK, args=("bench", duration), queue=queue, producer=producer
                )

    def backlog(self, queue: str) -> int:
        return int(self.broker_client.llen(queue))

    def top_up(self, queue: str, *, low: int, high: int, duration: float = 0.0) -> None:
        waiting = self.backlog(queue)
        if waiting < low:
            self.send(queue, high - waiting, duration)

    def drop_backlog(self, queue: str) -> None:
        self.broker_client.delete(queue)

    def new_starts(self) -> list[Start]:
        """Task starts recorded since the last call."""
        raw = self.records.lrange(self.record_key, self._read, -1)
        self._read += len(raw)
        starts = []
        for item in raw:
            entry = json.loads(item)
            starts.append(Start(entry["worker"], entry["queue"], entry["started"]))
        return starts

    def record_count(self) -> int:
        return int(self.records.llen(self.record_key))

    # -- the store's command counters ---------------------------------------------------------
    def store_commands(self) -> dict[str, int]:
        """Calls per command on the store server, leaving out INFO (the counting itself)."""
        stats = self.store_client.info("commandstats")
        return {
            name.removeprefix("cmdstat_"): int(value["calls"])
            for name, value in stats.items()
            if name != "cmdstat_info"
        }

    def close(self, *, keep_logs: bool = False) -> None:
        self.stop_workers(self.workers)
        self._servers.close()
        if not keep_logs:
            shutil.rmtree(self.tmp, ignore_errors=True)


def settle(seconds: float) -> None:
    """Let worker processes finish starting up before a measurement (not a synchronisation)."""
    time.sleep(seconds)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def conditions(load_before: tuple[float, ...], started: float) -> dict[str, Any]:
    """The machine, the versions and the load around a run that began at ``started``
    (``time.monotonic()``) with the load average ``load_before``."""
    return {
        "cpus": os.cpu_count(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "elapsed_s": round(time.monotonic() - started, 1),
        "python": platform.python_version(),
        "celery": celery.__version__,
        "kombu": kombu.__version__,
        "redis_py": redis.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }


def quick_main(doc: str, run: Callable[[bool], dict[str, Any]], quick: str) -> None:
    """A benchmark's command line: ``--quick`` (``quick`` says what it runs), then one JSON
    object on stdout; SIGTERM stops it as Ctrl-C would (its processes stopped)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick)
    args = parser.parse_args()
    raise_on_sigterm()
    print(json.dumps(run(args.quick), indent=1))
