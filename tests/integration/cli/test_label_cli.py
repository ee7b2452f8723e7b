"""``--label`` on the command line, on a real Redis store (no worker needed): what is refused,
what is warned about, and what ``pause status`` shows."""

from __future__ import annotations

import pytest

import celery_pause
from support.cli import pause, resume, status_doc
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
