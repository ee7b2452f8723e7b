"""Real worker subprocesses, and polling with a deadline, for the behaviour tests."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psutil
import redis
from celery import Celery

import celery_pause
from celery_pause.model.fair import FAIR_REGISTRY, fair_holds, fair_queues
from celery_pause.model.parking import REGISTRY, parking_queues

from .polling import wait_for as wait_for
from .processes import track
from .proj import RECORD_TASK, RECORDS_URL, make_app
from .stores import REDIS_STORE, purge

REDIS_BROKER = "redis://127.0.0.1:6379/14"
AMQP_BROKER = "amqp://guest:guest@127.0.0.1:5672//"
ROOT = Path(__file__).resolve().parent.parent


def answers(host: str, port: int) -> bool:
    with suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


def started_between(
    records: Iterable[dict[str, Any]], start: float, end: float
) -> list[dict[str, Any]]:
    """The records (each with its ``started`` time) of starts in ``[start, end)``."""
    return [r for r in records if start <= r["started"] < end]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def redis_server(port: int, password: str, *args: str) -> Iterator[None]:
    """A private, throw-away redis-server on ``port`` for as long as the block runs
    (``args``: more of its options)."""
    server = subprocess.Popen(
        [
            shutil.which("redis-server") or "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--requirepass",
            password,
            *args,
        ],
        stdout=subprocess.DEVNULL,
    )
    track(server)
    try:
        wait_for(lambda: answers("127.0.0.1", port), timeout=10, what="redis-server to start")
        yield
    finally:
        server.terminate()
        server.wait(10)


class Worker:
    """A real ``celery worker`` subprocess (prefork unless told otherwise)."""

    def __init__(
        self,
        cluster: Cluster,
        name: str,
        args: list[str],
        env: dict[str, str],
        prefix: Sequence[str] = (),
    ) -> None:
        self.cluster = cluster
        self.prefix = list(prefix)  # a command the worker runs under (the benchmark's valgrind)
        self.name = name
        self.hostname = f"{name}@{cluster.namespace}"
        self.log = cluster.tmp / f"{name}.log"
        self._args = args
        self._env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """The ``celery -A support.proj`` sub-command and its arguments."""
        return [
            "worker",
            "-n",
            self.hostname,
            "--without-mingle",
            "--without-gossip",
            "-l",
            "info",
            *self._args,
        ]

    def start(self) -> Worker:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    *self.prefix,
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "support.proj",
                    *self.command(),
                ],
                cwd=ROOT,
                env=self._env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        track(self.proc)
        return self

    def wait_applied(self, generation: int = 0, timeout: float = 30.0) -> celery_pause.WorkerReport:
        """Wait until this worker applied ``generation`` (or later) and runs nothing paused."""

        def applied() -> celery_pause.WorkerReport | None:
            self.check_alive()
            for report in celery_pause.status(self.cluster.app).workers:
                if report.hostname == self.hostname and report.quiet_for(generation):
                    return report
            return None

        return wait_for(applied, timeout=timeout, what=f"{self.hostname} to apply gen {generation}")

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(
                f"{self.hostname} exited with {self.proc.returncode}:\n{self.tail()}"
            )

    def stop(self, timeout: float = 30.0) -> int | None:
        """Warm shutdown (SIGTERM), escalating to SIGKILL after ``timeout`` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            stacks = self.stacks()
            self.kill()
            raise AssertionError(
                f"{self.hostname} did not stop within {timeout}s; its threads:\n{stacks}"
            ) from None

    def stacks(self, timeout: float = 5.0) -> str:
        """The stacks of the worker's threads, as Celery writes them to its log on
        ``SIGUSR1`` (their local variables left out), or what the log says if it does not."""
        assert self.proc is not None
        start = len(self.log.read_bytes())

        def dumped() -> str | None:
            text = self.log.read_bytes()[start:].decode(errors="replace")
            return text if "LOCAL VARIABLES" in text else None

        self.proc.send_signal(signal.SIGUSR1)
        try:
            return _stacks_only(wait_for(dumped, timeout=timeout, what="the threads' stacks"))
        except AssertionError:
            return self.log.read_bytes()[start:].decode(errors="replace")[-4000:] or "<none>"

    def kill(self) -> None:
        """SIGKILL the worker and its pool processes."""
        if self.proc is not None and self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def broker_ports(self, port: int) -> list[int]:
        """Local ports of this worker's TCP connections to ``port`` on the loopback."""
        assert self.proc is not None
        connections = psutil.Process(self.proc.pid).net_connections(kind="tcp")
        return [c.laddr.port for c in connections if c.raddr and c.raddr.port == port]

    def drop_connections(self) -> int:
        """Cut every connection of this worker to Redis or RabbitMQ, from the server side."""
        dropped = 0
        client = redis.Redis.from_url(REDIS_STORE)
        for port in self.broker_ports(6379):
            dropped += int(client.client_kill_filter(_id=None, addr=f"127.0.0.1:{port}") or 0)
        ports = set(self.broker_ports(5672))
        if ports:
            listing = subprocess.run(
                ["rabbitmqctl", "-q", "list_connections", "pid", "peer_port"],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
            for line in listing.splitlines():
                pid, _, port = line.partition("\t")
                if port.strip().isdigit() and int(port) in ports:
                    subprocess.run(
                        ["rabbitmqctl", "-q", "close_connection", pid, "test: connection dropped"],
                        capture_output=True,
                        timeout=60,
                        check=True,
                    )
                    dropped += 1
        return dropped

    def log_count(self, text: str) -> int:
        try:
            return self.log.read_text(errors="replace").count(text)
        except OSError:
            return 0

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"


def _stacks_only(dump: str) -> str:
    """A Celery thread dump (``celery.utils.debug.cry``) without each thread's local
    variables: a thread's section is its name, a rule, its stack, a rule, then the locals."""
    lines, kept, in_locals = dump.splitlines(), [], False
    for i, line in enumerate(lines):
        rule_next = i + 1 < len(lines) and lines[i + 1].startswith("=====")
        if line == "LOCAL VARIABLES":
            in_locals = True
        elif in_locals and rule_next and line and not line.startswith(("=", " ", "{", "'")):
            in_locals = False  # the next thread's name
        if not in_locals:
            kept.append(line)
    return "\n".join(kept)


def stop_all(workers: Iterable[Worker], timeout: float = 20.0) -> None:
    """Warm shutdown of ``workers`` at once (SIGTERM to each), SIGKILL for those still
    running after ``timeout`` seconds."""
    running = [w for w in workers if w.proc is not None and w.proc.poll() is None]
    for worker in running:
        assert worker.proc is not None
        worker.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for worker in running:
        assert worker.proc is not None
        with suppress(subprocess.TimeoutExpired):
            worker.proc.wait(max(0.0, deadline - time.monotonic()))
        worker.kill()


class Beat(Worker):
    """A real ``celery beat`` subprocess with the default scheduler, as users run it."""

    def command(self) -> list[str]:
        return ["beat", "-s", str(self.cluster.tmp / "beat-schedule"), "-l", "info", *self._args]


class Cluster:
    """One test's private namespace: its client app, its workers, their task records."""

    def __init__(
        self,
        *,
        broker: str,
        tmp: Path,
        store: str | None = None,
        poll_interval: float = 1.0,
        private_broker_keys: bool = False,
        **extra: Any,
    ) -> None:
        self.namespace = "t" + uuid.uuid4().hex[:10]
        self.broker = broker
        self.store_url = REDIS_STORE if store is None else store  # "": no store set
        self.tmp = tmp
        self.poll_interval = poll_interval
        if private_broker_keys:
            # kombu's own Redis keys (unacked messages, bindings) private to the test too
            options = extra.get("broker_transport_options", {})
            extra["broker_transport_options"] = {
                "global_keyprefix": f"{self.namespace}:",
                **options,
            }
        self.extra = extra
        self.app: Celery = make_app(
            namespace=self.namespace,
            broker=broker,
            store=self.store_url,
            poll_interval=poll_interval,
            **extra,
        )
        self.records_client = redis.Redis.from_url(RECORDS_URL)
        self.record_key = f"celery-pause-test:{self.namespace}:records"
        self.finished_key = f"celery-pause-test:{self.namespace}:finished"
        self.workers: list[Worker] = []
        self.beats: list[Beat] = []

    def queue(self, name: str = "default") -> str:
        return f"{self.namespace}.{name}"

    def worker(
        self,
        name: str = "w1",
        *,
        queues: list[str] | None = None,
        concurrency: int = 1,
        pool: str = "prefork",
        extra: dict[str, Any] | None = None,
        start: bool = True,
        args: tuple[str, ...] = (),
        install: bool = True,
        store: str | None = None,
        environ: dict[str, str] | None = None,
    ) -> Worker:
        """A worker of this cluster's app; ``install=False`` leaves the pause step out,
        ``store`` reaches the cluster's store another way (through a proxy), ``environ``
        adds to its environment (``LD_PRELOAD``)."""
        names = ",".join(queues or [self.queue()])
        options = ["-P", pool, "-c", str(concurrency), "-Q", names, *args]
        env = {**self.env(extra), "PAUSE_TEST_INSTALL": "1" if install else "0"}
        if store is not None:
            env["PAUSE_TEST_STORE"] = store
        env.update(environ or {})
        worker = Worker(self, name, options, env)
        self.workers.append(worker)
        return worker.start() if start else worker

    def beat(self, *, extra: dict[str, Any] | None = None, args: tuple[str, ...] = ()) -> Beat:
        """``celery -A support.proj beat`` of this cluster's app (``extra`` settings added)."""
        beat = Beat(self, "beat", list(args), self.env(extra))
        self.beats.append(beat)
        beat.start()
        return beat

    def env(self, extra: dict[str, Any] | None = None) -> dict[str, str]:
        """The environment under which ``celery -A support.proj`` builds this cluster's app."""
        return {
            **os.environ,
            "PAUSE_TEST_NAMESPACE": self.namespace,
            "PAUSE_TEST_BROKER": self.broker,
            "PAUSE_TEST_STORE": self.store_url,
            "PAUSE_TEST_POLL": str(self.poll_interval),
            "PAUSE_TEST_EXTRA": json.dumps({**self.extra, **(extra or {})}),
            "PYTHONPATH": str(ROOT),
        }

    def send(
        self,
        tag: str,
        duration: float = 0.0,
        *,
        queue: str | None = None,
        task: str = RECORD_TASK,
        **options: Any,
    ) -> str:
        result = self.app.send_task(
            task, args=(tag, duration), queue=queue or self.queue(), **options
        )
        return str(result.id)

    def resume_and_check(self, sent: list[str], paused_since: float) -> list[dict[str, Any]]:
        """Resume; check nothing started while paused and every task in ``sent`` ran once."""
        resumed_at = time.time()
        celery_pause.resume(self.app)
        records = self.wait_records(len(sent))
        started = self.started_between(paused_since, resumed_at)
        assert not started, f"tasks started while paused: {started}"
        assert sorted(r["id"] for r in records) == sorted(sent), "lost or duplicated tasks"
        return records

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.records_client.lrange(self.record_key, 0, -1)]

    def started_between(self, start: float, end: float) -> list[dict[str, Any]]:
        """This cluster's task records of starts in ``[start, end)``."""
        return started_between(self.records(), start, end)

    def wait_records(self, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        def enough() -> list[dict[str, Any]] | None:
            records = self.records()
            return records if len(records) >= count else None

        return wait_for(enough, timeout=timeout, what=f"{count} task starts")

    def spans(self, count: int, timeout: float = 60.0) -> dict[str, tuple[float, float]]:
        """Each task's start and end by its id, once ``count`` ended."""

        def ended() -> dict[str, float] | None:
            raw = self.records_client.lrange(self.finished_key, 0, -1)
            ends = {entry["id"]: entry["finished"] for entry in map(json.loads, raw)}
            return ends if len(ends) >= count else None

        ends = wait_for(ended, timeout=timeout, what=f"{count} tasks to end")
        return {r["id"]: (r["started"], ends[r["id"]]) for r in self.records()}

    def close(self) -> None:
        for worker in [*self.beats, *self.workers]:
            with suppress(AssertionError):
                worker.stop(timeout=20)
            worker.kill()
        parking: list[str] = []
        with suppress(Exception):  # the parking queues the store names, to delete them too
            record = celery_pause.stores.store_for(self.app).read_record(REGISTRY)
            parking = list(parking_queues(record).values())
            fair = celery_pause.stores.store_for(self.app).read_record(FAIR_REGISTRY)
            parking += [q for hold in fair_holds(fair) for q in fair_queues(fair, hold).values()]
        with suppress(celery_pause.PauseError):
            celery_pause.stores.store_for(self.app).close()
        prefix = f"celery-pause-test:{self.namespace}"
        if self.store_url.startswith("redis"):
            client = redis.Redis.from_url(self.store_url)
            with suppress(redis.RedisError):  # a test's private store may be gone already
                for key in client.scan_iter(f"{prefix}*"):
                    client.delete(key)
        elif self.store_url.startswith(("db+", "memory")):
            purge(self.store_url, prefix)
        self.records_client.delete(self.record_key, self.finished_key)
        self._delete_queues(parking)

    def _delete_queues(self, parking: list[str]) -> None:
        names = {
            self.queue(),
            *parking,
            *(q for w in self.workers for q in w._args[w._args.index("-Q") + 1].split(",")),
        }
        with suppress(Exception), self.app.connection_for_write() as conn:
            channel = conn.default_channel
            for name in names:
                with suppress(Exception):
                    channel.queue_delete(name)
