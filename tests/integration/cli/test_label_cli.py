"""``--label`` on the command line, on a real Redis store (no worker needed): what is refused,
what is warned about, and what ``pause status`` shows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import celery_pause
from celery_pause import cli
from support.cli import invoke, pause, resume, status_doc
from support.harness import Cluster


@pytest.mark.parametrize(
    ("label", "says"),
    [
        ("tenant", "label must be NAME=VALUE, got 'tenant'"),
        ("=acme", "label must be NAME=VALUE, got '=acme'"),
        ("tenant=", "label must be NAME=VALUE"),
        ("tenant=a,,tenant=b", "empty label name"),
        ("tenant=" + "x" * 300, "longer than 200"),
    ],
)
def test_a_bad_label_is_a_usage_error_and_writes_nothing(
    redis_cluster: Cluster, label: str, says: str
) -> None:
    # When a pause names a bad label, Then it is a usage error and nothing is written
    result = pause(redis_cluster, "--label", label)
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert celery_pause.status(redis_cluster.app).state.generation == 0


def test_a_label_pause_is_shown_warned_about_and_resumed(redis_cluster: Cluster) -> None:
    # When tenant acme is paused by a label the app does not configure (a header only)
    result = pause(redis_cluster, "--label", "tenant=acme", "--reason", "their API is down")

    # Then it is recorded, with a warning that only a header carries it
    assert result.exit_code == 0, result.output
    assert "Paused all queues with label tenant=acme" in result.stdout
    assert "label 'tenant' is not in pause_labels" in result.output
    doc = status_doc(redis_cluster)
    (hold,) = doc["holds"]
    assert hold["labels"] == ["tenant=acme"] and doc["state"] == "PARTIAL"

    # When it is resumed by the same label, Then nothing is paused
    assert resume(redis_cluster, "--label", "tenant=acme").exit_code == 0
    assert status_doc(redis_cluster)["holds"] == []


@pytest.fixture
def tenant_cluster(redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """A private app whose tasks carry a ``tenant`` label (keyword ``tenant_id``)."""
    cluster = Cluster(broker=redis_url, tmp=tmp_path, pause_labels={"tenant": "tenant_id"})
    yield cluster
    cluster.close()


@pytest.mark.parametrize(
    ("per", "says"),
    [
        ("", "per must name a label"),
        ("tenant=acme", "per must name a label"),
        ("region", "per='region' names no label of pause_labels (labels: tenant)"),
    ],
)
def test_a_per_that_names_no_label_is_a_usage_error_and_writes_nothing(
    tenant_cluster: Cluster, per: str, says: str
) -> None:
    result = invoke(tenant_cluster.app, cli.throttle, "--concurrency", "2", "--per", per)
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert celery_pause.status(tenant_cluster.app).state.generation == 0


def test_a_limit_per_tenant_is_said_shown_and_lifted(tenant_cluster: Cluster) -> None:
    # When every tenant of the reports is limited to 2 at once
    args = ("--tasks", "proj.reports.*", "--concurrency", "2", "--per", "tenant")
    result = invoke(tenant_cluster.app, cli.throttle, *args)

    # Then it says so, the JSON status and the history carry the label, and nothing is in use
    assert result.exit_code == 0, result.output
    assert "to at most 2 at once per tenant across the cluster" in result.stdout
    doc = status_doc(tenant_cluster)
    (hold,) = doc["holds"]
    assert (hold["concurrency"], hold["per"]) == (2, "tenant")
    (limit,) = doc["limits"]
    assert (limit["id"], limit["partitions"], limit["busiest"]) == (hold["id"], 0, [])
    text = pause(tenant_cluster, "status").stdout
    assert "0 tenant values in use" in text
    (entry,) = celery_pause.history(tenant_cluster.app, limit=1)
    assert entry.limit is not None and entry.limit.per == "tenant"

    # When resumed, Then the limit is gone
    assert resume(tenant_cluster).exit_code == 0
    assert status_doc(tenant_cluster)["holds"] == []
