"""celery-pause, the whole story in one command (no servers needed).

    pip install -e . && python examples/demo.py [--broker redis://localhost:6379/0]

Two real workers (one prefork, one threads) start on kombu's filesystem
transport with the file store in a temporary directory (or on the broker you
give). Tasks flow; the demo pauses through the CLI (``celery -A demo_app pause
--wait``); a live view shows in-flight tasks finishing and nothing starting,
and the tasks a worker had already received held in its gate; a worker
restarted while paused starts nothing; the demo resumes, every task runs, and
it names the tasks received before the pause that started only after it. The
last line is

    ran=<n> started_during_pause=<n> lost=<n>

and the exit code is 0 only if nothing started during the pause and nothing
was lost. Every process it starts is stopped on the way out, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import FrameType
from typing import Any

EXAMPLES = Path(__file__).resolve().parent
TASK_SECONDS = 1.0
SEND_EVERY = 0.5
BURST = 10
CONCURRENCY = 2
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
DRAIN_TIMEOUT = 60.0


class DemoFailed(Exception):
    """A step of the story could not be completed."""


# -- output --------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.start = time.monotonic()

    def say(self, text: str = "") -> None:
        print(f"[{time.monotonic() - self.start:5.1f}s] {text}", flush=True)


def quote_command(args: list[str]) -> str:
    return "$ " + " ".join(shlex.quote(a) for a in args)


# -- processes -------------------------------------------------------------------------------
@dataclass
class Worker:
    name: str
    hostname: str
    log: Path
    env: dict[str, str]
    pool: str = "prefork"
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "demo_app", "worker",
                 "-n", self.hostname, "-P", self.pool, "-c", str(CONCURRENCY),
                 "--without-mingle", "--without-gossip", "--without-heartbeat", "-l", "info"],
                cwd=EXAMPLES, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the demo only; it stops us in order
            )  # fmt: skip

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT) -> bool:
        """Warm shutdown; SIGKILL the whole process group after ``timeout``. True if warm."""
        if self.proc is None:
            return True
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return False
        self.kill()  # pool processes left behind, if any
        return True

    def kill(self) -> None:
        if self.proc is None:
            return
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return "(no log)"
        return "\n".join("      " + line for line in text)


@dataclass
class Records:
    """Start and finish records the task writes, one file each."""

    folder: Path

    def read(self, kind: str) -> list[dict[str, Any]]:
        entries = []
        with suppress(FileNotFoundError):
            for path in self.folder.glob(f"*.{kind}"):
                with suppress(OSError, ValueError):
                    entries.append(json.loads(path.read_text()))
        return entries


class Sender(threading.Thread):
    """Sends a task every ``SEND_EVERY`` seconds until stopped."""

    def __init__(self, app: Any) -> None:
        super().__init__(name="demo-sender", daemon=True)
        self.app = app
        self.sent: list[str] = []
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                result = self.app.send_task("demo.work", args=(TASK_SECONDS,))
                self.sent.append(str(result.id))
                self.stopping.wait(SEND_EVERY)
        except BaseException as exc:
            self.error = exc

    def burst(self, count: int) -> None:
        """Send ``count`` tasks at once (from the calling thread)."""
        for _ in range(count):
            self.sent.append(str(self.app.send_task("demo.work", args=(TASK_SECONDS,)).id))

    def stop(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(10)


@dataclass(frozen=True)
class Tally:
    """The outcome: tasks run, started while paused, lost, and started twice."""

    ran: int
    started_during_pause: int
    lost: int
    twice: int

    @classmethod
    def of(
        cls, sent: set[str], starts: list[dict[str, Any]], paused_at: float, resumed_at: float
    ) -> Tally:
        started = [r["id"] for r in starts]
        return cls(
            ran=len(set(started) & sent),
            started_during_pause=sum(1 for r in starts if paused_at <= r["at"] < resumed_at),
            lost=len(sent - set(started)),
            twice=len(started) - len(set(started)),
        )

    @property
    def held(self) -> bool:
        return not (self.started_during_pause or self.lost or self.twice)

    def line(self) -> str:
        return f"ran={self.ran} started_during_pause={self.started_during_pause} lost={self.lost}"


# -- the story -------------------------------------------------------------------------------
class Demo:
    def __init__(self, broker: str, keep: bool) -> None:
        self.broker = broker
        self.keep = keep
        self.run_id = uuid.uuid4().hex[:10]
        self.dir = Path(tempfile.mkdtemp(prefix="celery-pause-demo-"))
        self.clock = Clock()
        self.env = {
            **os.environ,
            "DEMO_DIR": str(self.dir),
            "DEMO_ID": self.run_id,
            "DEMO_BROKER": broker,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(EXAMPLES), os.environ.get("PYTHONPATH", "")) if p
            ),
            "PYTHONUNBUFFERED": "1",
        }
        os.environ.update({k: self.env[k] for k in ("DEMO_DIR", "DEMO_ID", "DEMO_BROKER")})
        sys.path.insert(0, str(EXAMPLES))
        import demo_app  # configured by the DEMO_* variables just set

        self.demo_app = demo_app
        self.app = demo_app.app
        self.records = Records(demo_app.RECORDS)
        # On kombu's filesystem transport a prefork worker takes a message only once a pool
        # process is free (Celery's synchronous loop waits for a slot): the threads worker
        # prefetches, and shows what a gate does with tasks a worker has already received.
        self.workers = [
            Worker(name, f"{name}@demo-{self.run_id}", self.dir / f"{name}.log", self.env, pool)
            for name, pool in (("w1", "prefork"), ("w2", "threads"))
        ]
        self.sender = Sender(self.app)
        self.cli: subprocess.Popen[str] | None = None
        self.paused_at = self.resumed_at = 0.0

    # -- helpers ---------------------------------------------------------------------------
    def status(self) -> Any:
        import celery_pause

        return celery_pause.status(self.app)

    def reports(self) -> dict[str, Any]:
        return {w.hostname: w for w in self.status().workers}

    def wait_for(self, what: str, probe: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not probe():
            for worker in self.workers:
                if worker.proc is not None and not worker.alive():
                    raise DemoFailed(f"{worker.name} exited:\n{worker.tail()}")
            if time.monotonic() > deadline:
                raise DemoFailed(f"timed out after {timeout:g}s waiting for {what}")
            time.sleep(0.1)

    def applied(self, worker: Worker, generation: int) -> bool:
        report = self.reports().get(worker.hostname)
        return bool(report and report.status == "applied" and report.generation >= generation)

    def waiting(self) -> int | None:
        queue = self.demo_app.QUEUE
        if not self.broker:
            folder = self.dir / "broker"
            return sum(1 for p in folder.iterdir() if p.name.endswith(f".{queue}.msg"))
        from celery_pause.api.depths import queue_depths

        return queue_depths(self.app, [queue])[queue]

    def view(self, since: float | None = None) -> str:
        """One line: what runs (and where), what started, what waits, what the gates hold."""
        starts = self.records.read("start")
        finished = {r["id"] for r in self.records.read("finish")}
        running = [r for r in starts if r["id"] not in finished]
        labels = [f"{r['id'][:8]} on {r['worker'].split('@')[0]}" for r in running[:4]]
        more = f" +{len(running) - 4}" if len(running) > 4 else ""
        line = f"running {len(running)}" + (f" ({', '.join(labels)}{more})" if labels else "")
        line += f" | started {len(starts)}"
        if since is not None:
            line += f" ({sum(1 for r in starts if r['at'] >= since)} since paused)"
        line += f" | finished {len(finished)}"
        waiting = self.waiting()
        line += f" | waiting {'?' if waiting is None else waiting}"
        held = {w.hostname.split("@")[0]: w.held for w in self.status().workers}
        per_worker = ", ".join(f"{name} {count}" for name, count in sorted(held.items()) if count)
        return (
            line
            + f" | held in gates {sum(held.values())}"
            + (f" ({per_worker})" if per_worker else "")
        )

    def held_then_ran(self) -> list[tuple[str, str, float, float]]:
        """Tasks received before the pause that started only after the resume: ``(id,
        worker, received, started)``, as the worker that held them recorded."""
        started = {r["id"]: r["at"] for r in self.records.read("start")}
        first: dict[str, dict[str, Any]] = {}
        for entry in sorted(self.records.read("received"), key=lambda r: r["at"]):
            first.setdefault(entry["id"], entry)
        return sorted(
            (task_id, entry["worker"].split("@")[0], entry["at"], started[task_id])
            for task_id, entry in first.items()
            if entry["at"] < self.paused_at and started.get(task_id, 0) >= self.resumed_at
        )

    def watch(self, seconds: float, since: float | None = None) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            self.clock.say("   " + self.view(since))

    def run_cli(self, *args: str) -> int:
        """Run ``celery -A demo_app ARGS`` and show its output as it comes."""
        command = [sys.executable, "-m", "celery", "-A", "demo_app", *args]
        print("         " + quote_command(["celery", "-A", "demo_app", *args]), flush=True)
        self.cli = subprocess.Popen(
            command, cwd=EXAMPLES, env=self.env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        assert self.cli.stdout is not None
        for line in self.cli.stdout:
            print("         | " + line.rstrip(), flush=True)
        code = self.cli.wait()
        self.cli = None
        return code

    # -- the story ---------------------------------------------------------------------------
    def run(self) -> int:
        say = self.clock.say
        where = (
            f"broker {self.app.connection_for_write().as_uri()}"
            if self.broker
            else "kombu's filesystem transport"
        )
        store = self.app.conf.pause_store_url.split("://")[0]
        say(
            f"celery-pause demo {self.run_id}: a prefork and a threads worker on {where}, "
            f"{store} store"
        )
        kept = "kept" if self.keep else "removed at the end unless it fails or --keep is given"
        say(f"   logs and data in {self.dir} ({kept})")

        if self.broker:
            try:
                with self.app.connection_for_write() as conn:
                    conn.ensure_connection(max_retries=1, timeout=5)
            except Exception as exc:
                raise DemoFailed(f"cannot reach the broker: {exc}") from None

        say(f"1. Starting two workers ({CONCURRENCY} pool processes each) ...")
        for worker in self.workers:
            worker.start()
        for worker in self.workers:
            self.wait_for(f"{worker.name} to start", lambda w=worker: self.applied(w, 0),
                          START_TIMEOUT)  # fmt: skip
        say("   both workers are up.")

        say(f"2. Tasks flow: one every {SEND_EVERY}s, each works {TASK_SECONDS}s.")
        self.sender.start()
        self.watch(2.0)
        say(f"   A burst of {BURST} more: the workers prefetch what they can.")
        self.sender.burst(BURST)
        self.watch(1.0)

        say("3. Pause through the CLI, waiting until in-flight tasks have finished:")
        code = self.run_cli("pause", "--wait", "--timeout", "30", "--reason", "demo: deploy")
        if code != 0:
            raise DemoFailed(f"`celery pause --wait` exited with {code}")
        self.paused_at = time.time()
        generation = self.status().state.generation
        say("   Paused. Nothing starts: new tasks wait in the queue, prefetched ones in the gates:")
        self.watch(2.0, since=self.paused_at)
        held = sum(w.held for w in self.status().workers)
        say(f"   {held} task(s) the workers had already received wait in their gates, unstarted.")

        restarted = self.workers[1]
        say(f"4. Restarting {restarted.name} while paused ...")
        if not restarted.stop():
            say(f"   {restarted.name} did not stop in {STOP_TIMEOUT:g}s: killed")
        restarted.start()
        self.wait_for(
            f"{restarted.name} to come back", lambda: self.applied(restarted, generation),
            START_TIMEOUT,
        )  # fmt: skip
        say(f"   {restarted.name} is back and paused from its first moment:")
        self.watch(2.0, since=self.paused_at)

        say("5. Status through the CLI:")
        self.run_cli("pause", "status")

        say("6. Resume:")
        self.resumed_at = time.time()
        self.sender.stop()
        if self.sender.error is not None:
            raise DemoFailed(f"sending tasks failed: {self.sender.error!r}")
        code = self.run_cli("resume")
        if code != 0:
            raise DemoFailed(f"`celery resume` exited with {code}")
        sent = set(self.sender.sent)
        say(f"   draining the {len(sent)} tasks sent ...")
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while time.monotonic() < deadline:
            finished = {r["id"] for r in self.records.read("finish")}
            if sent <= finished:
                break
            time.sleep(1.0)
            say("   " + self.view())
        held = self.held_then_ran()
        say(f"   {len(held)} task(s) received before the pause started only after the resume:")
        for task_id, worker, received, started in held[:5]:
            say(
                f"     {task_id[:8]}: received by {worker} {self.paused_at - received:.1f}s "
                f"before the pause, started {started - self.resumed_at:.1f}s after the resume"
            )
        return self.summary(sent)

    def summary(self, sent: set[str]) -> int:
        tally = Tally.of(sent, self.records.read("start"), self.paused_at, self.resumed_at)
        if tally.twice:
            self.clock.say(f"   {tally.twice} task(s) started more than once")
        self.clock.say(
            "The pause held: nothing started while paused, nothing was lost."
            if tally.held
            else "The pause did NOT hold."
        )
        print(tally.line(), flush=True)
        return 0 if tally.held else 1

    # -- cleaning up -------------------------------------------------------------------------
    def close(self, failed: bool) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
        self.sender.stop()
        if self.cli is not None and self.cli.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.cli.pid, signal.SIGKILL)
            self.cli.wait(10)
        stoppers = [threading.Thread(target=w.stop) for w in self.workers]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()
        self._forget_broker_state()
        if failed or self.keep:
            print(f"Logs and data kept in {self.dir}", flush=True)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _forget_broker_state(self) -> None:
        """On a shared Redis or RabbitMQ, remove what this run created (and nothing else)."""
        if self.broker.startswith(("redis://", "rediss://")):
            with suppress(Exception):
                import redis

                client = redis.Redis.from_url(self.broker, socket_timeout=5)
                for key in client.scan_iter(f"*{self.run_id}*", count=1000):
                    client.delete(key)
        elif self.broker:
            with suppress(Exception), self.app.connection_for_write() as conn:
                conn.default_channel.queue_delete(self.demo_app.QUEUE)


def entry_points_installed() -> bool:
    return any(ep.name == "pause" for ep in entry_points(group="celery.commands"))


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Clean up on SIGTERM/SIGHUP as on Ctrl-C."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--broker", default="",
        help="broker URL (redis://… runs the story on Redis, with the store in Redis too); "
        "default: kombu's filesystem transport in a temporary directory",
    )  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the logs and data directory")
    args = parser.parse_args(argv)
    if not entry_points_installed():
        print("The `celery pause` command is not installed: run `pip install -e .` first.")
        return 2
    with sigterm_as_interrupt():
        demo = Demo(args.broker, args.keep)
        failed = True
        try:
            code = demo.run()
            failed = code != 0
            return code
        except Exception as exc:
            print(f"Demo failed: {exc}", flush=True)
            for worker in demo.workers:
                if worker.proc is not None:
                    print(f"   last lines of {worker.name}'s log:\n{worker.tail()}", flush=True)
            return 1
        except KeyboardInterrupt:
            print("\nInterrupted: stopping every process the demo started ...", flush=True)
            failed = False
            return 130
        finally:
            demo.close(failed)


if __name__ == "__main__":
    sys.exit(main())
