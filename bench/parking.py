"""A paused tenant's deep backlog: parked on the broker, beside held in the workers, one run.

    python -m bench.parking            # 100,000 tasks of tenant A; one JSON object on stdout
    python -m bench.parking --quick    # 5,000 of them

Starts two private ``redis-server`` processes (broker, store) and two real prefork ``celery
worker`` processes (concurrency 2, prefetch 4) of ``support/proj.py`` with ``pause_labels =
{"tenant": "tenant_id"}``, twice: once with ``pause_max_held`` at its default (parking), once
with it out of reach (every held message stays in the worker, as before parking). Each time
tenant A is paused, its backlog is pushed into the shared queue at once, and then for 180 s
(20 with ``--quick``) tenant B sends 40 tasks/s and tenant A 100 tasks/s more into it.
Sampled every second: each worker's resident memory (its pool processes included), the
messages it holds, the messages parked and those unacknowledged on the broker; B's start
latency from the time each of its tasks was sent.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import psutil

import celery_pause
from bench.stats import percentile
from bench.world import World, conditions, log, quick_main, settle
from celery_pause.model.parking import value_queue
from celery_pause.settings import config_for
from support.harness import Worker, wait_for
from support.proj import RECORD_TASK

LABELS = {"tenant": "tenant_id"}
B_RATE = 40.0
A_RATE = 100.0
UNBOUNDED = 10**9
"""``pause_max_held`` out of reach: the workers hold every message, as before parking."""


@dataclass
class Samples:
    """What one case saw, second by second."""

    rss_mb: dict[str, list[float]] = field(default_factory=dict)
    held: dict[str, list[int]] = field(default_factory=dict)
    parked: list[int] = field(default_factory=list)
    unacked: list[int] = field(default_factory=list)
    at: list[float] = field(default_factory=list)


def run(quick: bool) -> dict[str, Any]:
    started, load_before = time.monotonic(), os.getloadavg()
    backlog, window = (5_000, 20.0) if quick else (100_000, 180.0)
    cases = {
        "parking": run_case(None, backlog, window),
        "holding": run_case(UNBOUNDED, backlog, window),
    }
    return {
        "backlog": backlog,
        "window_s": window,
        "b_rate": B_RATE,
        "a_rate": A_RATE,
        "cases": cases,
        "conditions": conditions(load_before, started),
    }


def run_case(max_held: int | None, backlog: int, window: float) -> dict[str, Any]:
    name = "holding" if max_held else "parking"
    conf: dict[str, Any] = {"pause_labels": LABELS, "worker_prefetch_multiplier": 4}
    if max_held:
        conf["pause_max_held"] = max_held
    world = World(poll_interval=1.0, **conf)
    try:
        queue = world.queue("shared")
        workers = world.start_workers(["w1", "w2"], queue=queue, concurrency=2)
        settle(2.0)
        idle = {w.hostname: rss_mb(w) for w in workers}
        hold = celery_pause.pause(world.app, labels=["tenant=A"], wait=True).hold.id
        parking = value_queue(config_for(world.app).key_prefix, hold, "A")
        log(f"{name}: {backlog} tasks of A into the queue at once")
        fill(world, queue, backlog)
        log(f"{name}: B at {B_RATE:g}/s and A at {A_RATE:g}/s for {window:g}s")
        samples, b_sent, moved_at = drive(world, queue, workers, parking, window)
        log(f"{name}: backlog out of the shared queue after {moved_at}s; resuming A")
        latencies = b_latencies(world, b_sent)
        celery_pause.resume(world.app)
        wait_for(lambda: world.backlog(queue) == 0, timeout=600, what="the backlog to drain")
        return figures(name, samples, idle, latencies, moved_at, backlog)
    finally:
        world.close()


def drive(
    world: World, queue: str, workers: list[Worker], parking: str, window: float
) -> tuple[Samples, dict[str, float], float | None]:
    """Send B and A at their rates for ``window`` seconds, sampling every second; the samples,
    B's send times by tag, and when the queued backlog was moved out of the shared queue."""
    samples, b_sent = Samples(), {}
    begin = time.time()
    sent_a = sent_b = 0
    next_sample, moved_at = begin, None
    with world.app.producer_or_acquire() as producer:
        while (now := time.time()) < begin + window:
            while sent_b < (now - begin) * B_RATE:
                tag = f"B{sent_b}"
                b_sent[tag] = time.time()
                send_one(world, queue, "B", tag, producer)
                sent_b += 1
            while sent_a < (now - begin) * A_RATE:
                send_one(world, queue, "A", f"A+{sent_a}", producer)
                sent_a += 1
            if now >= next_sample:
                sample(world, workers, parking, samples, now - begin)
                if moved_at is None and world.backlog(queue) < B_RATE:
                    moved_at = now - begin
                next_sample += 1.0
            time.sleep(0.005)
    return samples, b_sent, moved_at


def sample(world: World, workers: list[Worker], parking: str, samples: Samples, at: float) -> None:
    """One sample; held counts as each worker last reported (a worker busy holding a deep
    backlog may report late: its last report stands)."""
    samples.at.append(round(at, 1))
    reports = {report.hostname: report for report in celery_pause.status(world.app).workers}
    for worker in workers:
        samples.rss_mb.setdefault(worker.hostname, []).append(rss_mb(worker))
        report = reports.get(worker.hostname)
        samples.held.setdefault(worker.hostname, []).append(report.held if report else 0)
    samples.parked.append(int(world.broker_client.llen(parking)))
    samples.unacked.append(int(world.broker_client.hlen("unacked")))


def figures(
    name: str,
    samples: Samples,
    idle: dict[str, float],
    latencies: list[tuple[float, float]],
    moved_at: float | None,
    backlog: int,
) -> dict[str, Any]:
    """The case's figures: memory over idle, held, parked, B's latency (all, and once the
    backlog ahead of it was moved out), and how fast the backlog was moved."""
    after = [lat for at, lat in latencies if moved_at is not None and at >= moved_at]
    moved_rate = round(backlog / moved_at, 1) if moved_at else None
    return {
        "rss_idle_mb": idle,
        "rss_peak_over_idle_mb": {
            host: round(max(values) - idle[host], 1) for host, values in samples.rss_mb.items()
        },
        "held_max": {host: max(values) for host, values in samples.held.items()},
        "parked_max": max(samples.parked, default=0),
        "unacked_max": max(samples.unacked, default=0),
        "b_tasks": len(latencies),
        "b_latency_p50_s": p(latencies, 50),
        "b_latency_p99_s": p(latencies, 99),
        "backlog_out_of_queue_at_s": moved_at,
        "b_latency_p99_after_s": round(percentile(after, 99), 3) if after else None,
        "moved_out_of_queue_per_s": moved_rate,
        "samples": samples.__dict__,
    }


def p(latencies: list[tuple[float, float]], pct: float) -> float | None:
    values = [lat for _, lat in latencies]
    return round(percentile(values, pct), 3) if values else None


def b_latencies(world: World, sent: dict[str, float]) -> list[tuple[float, float]]:
    """(seconds into the window it was sent, start latency) of each B task that started, once
    every B task started (a minute at most)."""
    begin = min(sent.values())

    def started() -> dict[str, float] | None:
        entries = map(json.loads, world.records.lrange(world.record_key, 0, -1))
        starts = {e["tag"]: e["started"] for e in entries if e["tag"] in sent}
        return starts if len(starts) == len(sent) else None

    starts = wait_for(started, timeout=120, what="B's tasks to start")
    return sorted((sent[tag] - begin, start - sent[tag]) for tag, start in starts.items())


def rss_mb(worker: Worker) -> float:
    """The worker's resident memory, its pool processes included, in MB."""
    assert worker.proc is not None
    main = psutil.Process(worker.proc.pid)
    processes = [main, *main.children(recursive=True)]
    return round(sum(proc.memory_info().rss for proc in processes) / 2**20, 1)


def fill(world: World, queue: str, count: int) -> None:
    """Put ``count`` tasks of A into ``queue`` at once: the message Celery sends for one,
    pushed ``count`` times with a new task id each (a Redis pipeline, in batches)."""
    template = f"{queue}.template"  # a queue no worker consumes
    send_one(world, template, "A", "A", None)
    raw = json.loads(world.broker_client.rpop(template))
    raw["properties"]["delivery_info"]["routing_key"] = queue
    for start in range(0, count, 10_000):
        pipe = world.broker_client.pipeline(transaction=False)
        for _ in range(start, min(count, start + 10_000)):
            task_id = str(uuid.uuid4())
            raw["headers"].update(id=task_id, root_id=task_id)
            raw["properties"].update(correlation_id=task_id, delivery_tag=str(uuid.uuid4()))
            pipe.lpush(queue, json.dumps(raw))
        pipe.execute()


def send_one(world: World, queue: str, tenant: str, tag: str, producer: Any) -> None:
    world.app.send_task(
        RECORD_TASK, args=(tag, 0.0), kwargs={"tenant_id": tenant}, queue=queue, producer=producer
    )


def main() -> None:
    quick_main(__doc__, run, "5,000 tasks, a 20 s window")


if __name__ == "__main__":
    main()
