"""The admin API takes labels as a JSON object too (``{"tenant": "acme"}``), checked as the
Python API checks a mapping."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import celery_pause
from support.admin import AUTH, admin_server
from support.harness import Cluster
from support.webclient import call


@pytest.fixture
def admin(redis_cluster: Cluster) -> Iterator[str]:
    with admin_server(redis_cluster.app) as url:
        yield url


def test_labels_as_an_object_pause_and_resume_over_http(redis_cluster: Cluster, admin: str) -> None:
    # When two tenants are paused with their labels as an object of a name to values
    labels = {"tenant": ["acme", "trial-*"]}
    paused = call(admin + "/pause", method="POST", headers=AUTH, body={"labels": labels})

    # Then the hold lists both labels, as the list form would
    assert paused.status == 200, paused.body
    assert paused.json()["hold"]["labels"] == ["tenant=acme", "tenant=trial-*"]
    assert celery_pause.status(redis_cluster.app).holds[0].scope.rule.labels == {
        "tenant=acme",
        "tenant=trial-*",
    }

    # When they are resumed by the same object, Then nothing is paused any more
    resumed = call(admin + "/resume", method="POST", headers=AUTH, body={"labels": labels})
    assert resumed.status == 200 and resumed.json()["flowing"] is True, resumed.body
    assert not celery_pause.status(redis_cluster.app).holds


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"labels": {"tenant": {"acme": 1}}}, "label 'tenant': a value is a string"),
        ({"labels": {"tenant": []}}, "label 'tenant' has no value"),
        ({"labels": {"ten ant": "acme"}}, "not a label name"),
        ({"labels": 5}, "labels must be a list of names, an object of label names to values"),
        ({"queues": {"a": "b"}}, "queues must be a list of names or a comma-separated string"),
    ],
    ids=["nested", "empty", "bad-name", "not-a-list", "queues-object"],
)
def test_a_bad_labels_object_is_refused_and_changes_nothing(
    redis_cluster: Cluster, admin: str, body: dict[str, object], says: str
) -> None:
    reply = call(admin + "/pause", method="POST", headers=AUTH, body=body)
    assert reply.status == 400 and says in reply.json()["error"], reply.body
    assert not celery_pause.status(redis_cluster.app).holds
