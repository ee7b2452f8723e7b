"""Fair share by tenant beside the broker's FIFO, on real workers, one run.

    python -m bench.fair            # a 100,000-task flood; one JSON object on stdout
    python -m bench.fair --quick    # a 3,000-task flood, smaller rounds

Starts two private ``redis-server`` processes (broker, store) and two real prefork ``celery
worker`` processes (concurrency 2, prefetch 4) of ``support/proj.py`` with ``pause_labels =
{"tenant": "tenant_id"}`` and the producer hook (``pause_park_at_send``) on. Three figures:

- *flood*: tenant A sends its flood into the shared queue, then tenant B sends 200 tasks; B's
  wait from its send to its start, under FIFO (no limit) and under ``throttle(fair="tenant")``,
  with the producer hook and without it (the workers then move the flood out of the queue);
- *weights*: both tenants' backlogs waiting under ``weights={"A": 3}``: A's share of the starts
  while both wait;
- *alone*: A's backlog alone, unthrottled and under the fair limit: starts a second, rounds of
  each alternating, and the store's commands per start (its own counters, as ``bench.limits``
  counts them: the commands a script runs count too); and once more under the fair limit
  without the producer hook (the workers park each task, then it is fed back).

Every task records its start (``support.proj.record``, ``TASK_S`` seconds long).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from typing import Any

import celery_pause
from bench.stats import median, percentile
from bench.world import World, conditions, log, quick_main
from celery_pause.api.sending import ParkAtSend
from celery_pause.beat.watch import BeatWatch
from support.harness import wait_for
from support.proj import RECORD_TASK

LABELS = {"tenant": "tenant_id"}
TASK_S = 0.002
"""How long each task runs: a short task, so the figures show the scheduling, not the work."""
NAMES = ["w1", "w2"]
B_TASKS = 200
STOCK = 64
"""Starts left out at each end of a window, past what the origin queue and the workers' prefetch
hold when a round begins or a tenant runs out."""


def run(quick: bool) -> dict[str, Any]:
    started, load_before = time.monotonic(), os.getloadavg()
    flood, backlog, rounds = (3_000, 1_500, 1) if quick else (100_000, 10_000, 2)
    figures = {
        "flood": {
            "fifo": flood_case(flood, fair=False, hook=True),
            "fair": flood_case(flood, fair=True, hook=True),
            "fair_without_hook": flood_case(flood, fair=True, hook=False),
        },
        "weights": weights_case(backlog),
        "alone": alone_case(backlog, rounds),
        "alone_without_hook": without_hook_case(backlog),
    }
    return {
        "flood": flood,
        "backlog": backlog,
        "task_s": TASK_S,
        "figures": figures,
        "conditions": conditions(load_before, started),
    }


def world(*, hook: bool = True) -> World:
    w = World(
        poll_interval=1.0,
        pause_labels=LABELS,
        pause_park_at_send=hook,
        worker_prefetch_multiplier=4,
    )
    celery_pause.install(w.app)
    return w


def hook_watch(w: World) -> BeatWatch | None:
    """The producer hook's copy of the state, if the hook is on and has sent."""
    hook = w.app.amqp.send_task_message
    return hook._watching() if isinstance(hook, ParkAtSend) else None


def close(w: World) -> None:
    """Stop the hook's thread, then the world (its store with it)."""
    watch = hook_watch(w)
    if watch is not None:
        watch.stop()
    w.close()


def fair_limit(w: World, **options: Any) -> None:
    """Put a fair limit by tenant in force, and wait until the producer hook (if on) sees it:
    it sends what it covers to the tenants' queues from then on."""
    celery_pause.throttle(w.app, fair="tenant", **options)
    watch = hook_watch(w)
    if watch is not None:
        watch.read_now()
        wait_for(
            lambda: any(h.limit and h.limit.fair for h in watch.active_holds()),
            timeout=10,
            what="the producer hook to see the fair limit",
        )


def flood_case(flood: int, *, fair: bool, hook: bool) -> dict[str, Any]:
    """A's flood, then B's 200: B's waits, and the capacity meanwhile (``hook``: the producer
    sends what waits for a turn straight to its value's queue; without, the workers move it)."""
    name = ("fair" if fair else "fifo") + ("" if hook else " without the hook")
    w = world(hook=hook)
    try:
        queue = w.queue("shared")
        w.start_workers(NAMES, queue=queue, concurrency=2)
        if fair:
            fair_limit(w, wait=True, timeout=60)
        log(f"flood ({name}): {flood} of A sent")
        starts = Starts(w)
        began = time.time()
        send(w, queue, "A", range(flood))
        sent_in = time.time() - began
        b_sent = send(w, queue, "B", range(B_TASKS))
        log(f"flood ({name}): A sent in {sent_in:.1f}s; B's {B_TASKS} sent, waiting for them")
        b_started = starts.of(b_sent, timeout=60 + flood / 50)
        waits = [b_started[tag] - at for tag, at in b_sent.items()]
        capacity = starts.per_second(min(b_sent.values()), max(b_started.values()))
        return {
            "a_sent_in_s": round(sent_in, 1),
            "b_wait_p50_s": round(percentile(waits, 50), 3),
            "b_wait_p95_s": round(percentile(waits, 95), 3),
            "b_wait_max_s": round(max(waits), 3),
            "starts_per_s_meanwhile": round(capacity, 1),
            "target_p95_s": round(2 + B_TASKS / (capacity / 2), 3) if fair else None,
        }
    finally:
        close(w)


def weights_case(backlog: int) -> dict[str, Any]:
    """Both backlogs waiting for their turns under A=3: A's share while both wait."""
    w = world()
    try:
        queue = w.queue("shared")
        fair_limit(w, weights={"A": 3})
        log(f"weights: {backlog} of A and {backlog} of B sent, then the workers started")
        starts = Starts(w)
        a_sent = send(w, queue, "A", range(backlog))
        b_sent = send(w, queue, "B", range(backlog))
        w.start_workers(NAMES, queue=queue, concurrency=2)
        starts.of([*a_sent, *b_sent], timeout=60 + backlog / 10)
        order = starts.tenants_in_order()
        first_out = min(len(order) - order[::-1].index(t) for t in ("A", "B"))
        both = order[STOCK : first_out - STOCK]
        return {
            "a_share_while_both_wait": round(both.count("A") / len(both), 3),
            "starts": len(both),
        }
    finally:
        close(w)


def alone_case(backlog: int, rounds: int) -> dict[str, Any]:
    """A's backlog alone, unthrottled and under the fair limit, alternating: starts a second
    from the first start to the last."""
    w = world()
    rates: dict[str, list[float]] = {"unthrottled": [], "fair": []}
    commands: dict[str, list[float]] = {"unthrottled": [], "fair": []}
    try:
        queue, starts = w.queue("shared"), Starts(w)
        for turn in range(rounds):
            for name in rates:
                if name == "fair":
                    fair_limit(w)
                sent = send(w, queue, "A", (f"{turn}{name}{i}" for i in range(backlog)))
                w.start_workers(NAMES, queue=queue, concurrency=2)
                before = w.store_commands()
                rates[name].append(drain_rate(starts, sent))
                spent = sum(w.store_commands().values()) - sum(before.values())
                commands[name].append(round(spent / backlog, 2))
                log(f"alone, round {turn + 1} ({name}): {rates[name][-1]:.1f} starts/s")
                w.stop_workers(list(w.workers))
                celery_pause.resume(w.app)
        unthrottled, fair = median(rates["unthrottled"]), median(rates["fair"])
        return {
            "unthrottled_per_s": rates["unthrottled"],
            "fair_per_s": rates["fair"],
            "fair_of_unthrottled": round(fair / unthrottled, 3),
            "store_commands_per_start": commands,
        }
    finally:
        close(w)


def without_hook_case(backlog: int) -> dict[str, Any]:
    """A's backlog alone under the fair limit, sent without the producer hook while the
    workers run: they park each task for its turn, then the feeder brings it back. Starts a
    second, and store commands per start (the claims the feeder takes for what workers
    parked count here)."""
    w = world(hook=False)
    try:
        queue, starts = w.queue("shared"), Starts(w)
        w.start_workers(NAMES, queue=queue, concurrency=2)
        fair_limit(w, wait=True, timeout=60)
        before = w.store_commands()
        sent = send(w, queue, "A", range(backlog))
        rate = drain_rate(starts, sent)
        spent = sum(w.store_commands().values()) - sum(before.values())
        log(f"alone without the hook: {rate:.1f} starts/s")
        return {"fair_per_s": rate, "store_commands_per_start": round(spent / backlog, 2)}
    finally:
        close(w)


def send(w: World, queue: str, tenant: str, tags: Iterable[Any]) -> dict[str, float]:
    """Send one task of ``tenant`` per tag, as an app sends them; when each was sent."""
    sent = {}
    with w.app.producer_or_acquire() as producer:
        for tag in tags:
            key = f"{tenant}{tag}"
            sent[key] = time.time()
            w.app.send_task(
                RECORD_TASK,
                args=(key, TASK_S),
                kwargs={"tenant_id": tenant},
                queue=queue,
                producer=producer,
            )
    return sent


class Starts:
    """The tasks' starts, read as they are recorded (each record read once): tag -> (tenant,
    start time)."""

    def __init__(self, w: World) -> None:
        self.w = w
        self.seen: dict[str, tuple[str, float]] = {}
        self._read = 0

    def read(self) -> dict[str, tuple[str, float]]:
        raw = self.w.records.lrange(self.w.record_key, self._read, -1)
        self._read += len(raw)
        for entry in map(json.loads, raw):
            self.seen[entry["tag"]] = (entry["labels"]["tenant_id"], entry["started"])
        return self.seen

    def of(self, tags: Iterable[str], timeout: float) -> dict[str, float]:
        """When each of ``tags`` started, once all have."""
        wanted = set(tags)

        def all_started() -> dict[str, float]:
            seen = self.read()
            return {t: seen[t][1] for t in wanted} if wanted <= seen.keys() else {}

        return wait_for(all_started, timeout=timeout, what=f"{len(wanted)} starts", interval=0.5)

    def tenants_in_order(self) -> list[str]:
        return [tenant for tenant, _ in sorted(self.read().values(), key=lambda s: s[1])]

    def per_second(self, since: float, until: float) -> float:
        count = sum(1 for _, at in self.read().values() if since <= at <= until)
        return count / max(until - since, 1e-3)


def drain_rate(starts: Starts, sent: dict[str, float]) -> float:
    """Starts a second of the tasks ``sent``, from the first start to the last."""
    times = starts.of(sent, timeout=60 + len(sent) / 20).values()
    return round(len(times) / (max(times) - min(times)), 1)


def main() -> None:
    quick_main(__doc__, run, "a 3,000-task flood, small rounds")


if __name__ == "__main__":
    main()
