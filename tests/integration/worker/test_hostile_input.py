"""Hostile message content through a real worker's gate: it stays alive, and the rules hold.

Hypothesis generates batches of tasks whose tenant label (a keyword argument or a message
header, in task protocol 1 or 2, JSON or pickle) is of any type and size: lone surrogates,
NUL, a megabyte, nested containers, bytes, integers past ``str``'s limit, objects whose
``str`` raises. A pause of tenant A, a limit per tenant and a rate limit are in force. The
worker must stay alive, every task of A must be held, every other task must run (those whose
label is unreadable count as one tenant), and after the resume each held task runs once.
(Issue #35: one task with ``tenant_id="\\ud800"`` used to stop every worker.)
"""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

import redis
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

import celery_pause
from celery_pause import cli
from celery_pause.model.content import label_value
from support.cli import invoke
from support.harness import AMQP_BROKER, Cluster, wait_for
from support.hostile import values
from support.proj import OTHER_TASK, RECORD_TASK, make_app

LABELS = {"tenant": "tenant_id"}
EXAMPLES = 20
"""Batches per broker (each a few tasks through the worker: about a second)."""

messages = st.fixed_dictionaries(
    {
        "value": values,
        "header": st.booleans(),
        "protocol": st.sampled_from([1, 2]),
        "serializer": st.sampled_from(["json", "pickle"]),
        "task": st.sampled_from([RECORD_TASK, OTHER_TASK]),
    }
)
POISON = {"value": "\ud800", "protocol": 2, "serializer": "json", "task": RECORD_TASK}


def test_no_message_content_stops_the_worker_or_the_tasks_beside_it(
    broker: str, tmp_path: Path
) -> None:
    # Given a worker (prefork on Redis, threads on RabbitMQ) that accepts JSON and pickle,
    # with tenant A paused, one task at once per tenant, and the other task type at 50/s
    cluster = Cluster(
        broker=broker, tmp=tmp_path, pause_labels=LABELS, accept_content=["json", "pickle"]
    )
    try:
        pool = "threads" if broker == AMQP_BROKER else "prefork"
        # (root, as CI runs: Celery refuses pickle to root unless told it is meant)
        worker = cluster.worker("w1", concurrency=2, pool=pool, environ={"C_FORCE_ROOT": "1"})
        worker.wait_applied()
        pause = celery_pause.pause(cluster.app, labels=["tenant=A"], wait=True, timeout=20)
        celery_pause.throttle(cluster.app, per="tenant", concurrency=1)
        celery_pause.throttle(cluster.app, tasks=[OTHER_TASK], rate="50/s")
        producers = {2: cluster.app, 1: make_app(**_client(cluster), task_protocol=1)}
        held: list[str] = []
        paused_at = time.time()

        def send(message: dict[str, Any], tag: str) -> str | None:
            """Send one task as ``message`` says; ``None`` if the producer or broker could
            not carry it (it was never sent)."""
            label = {"tenant": message["value"]}
            if message.get("header") and cluster.broker == AMQP_BROKER and _big(label):
                return None  # RabbitMQ closes the connection on a header frame over frame_max
            where = (
                {"headers": label}
                if message.get("header")
                else {"kwargs": {"tenant_id": label["tenant"]}}
            )
            try:
                result = producers[message["protocol"]].send_task(
                    message["task"],
                    args=(tag, 0.0),
                    queue=cluster.queue(),
                    serializer=message["serializer"],
                    **where,
                )
            except Exception:  # e.g. bytes in an AMQP header as JSON, a surrogate in AMQP
                return None
            return str(result.id)

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],  # a real worker: no shrinking runs
            suppress_health_check=list(HealthCheck),
        )
        @given(batch=st.lists(messages, min_size=1, max_size=4))
        @example(batch=[POISON, {**POISON, "header": True}])
        def one_batch(batch: list[dict[str, Any]]) -> None:
            # When a batch is sent, with one task of A and one of B
            batch = [*batch, {**POISON, "value": "A"}, {**POISON, "value": "B"}]
            must_run = []
            for i, message in enumerate(batch):
                task_id = send(message, f"m{len(held)}-{i}")
                if task_id is None:
                    continue
                (held if label_value(message["value"]) == "A" else must_run).append(task_id)

            # Then every task not of A runs, and the worker is alive
            wait_for(
                lambda: set(must_run) <= {r["id"] for r in cluster.records()},
                timeout=30,
                what="the batch's tasks outside the pause",
            )
            worker.check_alive()

        one_batch()

        # ... no task of A started, and the worker says nothing went wrong
        started = {r["id"] for r in cluster.records()}
        assert not started & set(held), "a task of the paused tenant started"
        assert worker.log_count("Unrecoverable error") == 0
        assert worker.log_count("is unreadable") >= 1, "no warning named an unreadable label"

        # When A is resumed, Then each of its tasks runs once, none before
        resumed_at = time.time()
        celery_pause.resume(cluster.app, hold=pause.hold.id)
        wait_for(
            lambda: set(held) <= {r["id"] for r in cluster.records()},
            timeout=60,
            what="A's tasks after the resume",
        )
        records = cluster.records()
        ids = [r["id"] for r in records]
        assert len(ids) == len(set(ids)), "a task ran twice"
        assert all(r["started"] >= resumed_at for r in records if r["id"] in held)
        assert paused_at < resumed_at
        worker.check_alive()
    finally:
        cluster.close()


def _big(value: Any) -> bool:
    """Whether ``value`` takes over 64 KiB pickled."""
    return len(pickle.dumps(value)) > 65_536


def _client(cluster: Cluster) -> dict[str, Any]:
    """What a second producer of ``cluster``'s app needs (its namespace, broker, no step)."""
    return {"namespace": cluster.namespace, "broker": cluster.broker, "install": False}


def test_megabyte_label_values_leave_the_status_the_store_and_the_log_small(
    redis_url: str, tmp_path: Path
) -> None:
    # Given a worker running two at once, with one task at once per tenant in force
    cluster = Cluster(broker=redis_url, tmp=tmp_path, pause_labels=LABELS)
    try:
        worker = cluster.worker("w1", concurrency=2)
        worker.wait_applied()
        celery_pause.throttle(cluster.app, per="tenant", concurrency=1)

        # When two tasks whose tenants are a megabyte each are sent, and one of them runs
        for tenant in ("a", "b"):
            cluster.send(tenant, 3.0, kwargs={"tenant_id": tenant * 1_000_000})
        wait_for(lambda: cluster.records(), timeout=20, what="a task to start")

        # Then neither status, nor the store, nor the worker's log holds the values
        text = invoke(cluster.app, cli.pause, "status").stdout
        document = invoke(cluster.app, cli.pause, "status", "--json").stdout
        assert "<unreadable>" in text, text
        assert len(text) < 10_000 and len(document) < 10_000, (len(text), len(document))
        client = redis.Redis.from_url(redis_url)
        keys = list(client.scan_iter(f"{cluster.app.conf.pause_key_prefix}*"))
        stored = sum(client.memory_usage(key) or 0 for key in keys)
        assert keys and stored < 50_000, stored
        assert worker.log.stat().st_size < 100_000
        # ... and both still run, one after the other (one value: unreadable)
        wait_for(lambda: len(cluster.records()) == 2, timeout=20, what="the second task")
    finally:
        cluster.close()
