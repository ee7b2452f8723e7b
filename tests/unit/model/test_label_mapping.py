"""Labels given as a mapping (``{"tenant": "acme"}``): the same scope as the list form, in
every entry (``pause``, ``throttle``, ``resume``, windows), and clear errors for bad ones."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

import celery_pause
from celery_pause.errors import InvalidInput, InvalidWindow
from celery_pause.model.scope import Scope
from celery_pause.model.validation import MAX_NAMES, check_scope, label_texts
from celery_pause.model.windows import parse_window
from celery_pause.stores.memory import forget_all


@pytest.mark.parametrize(
    ("mapping", "listed"),
    [
        ({"tenant": "acme"}, ["tenant=acme"]),
        ({"tenant": "trial-*"}, ["tenant=trial-*"]),
        ({"tenant": ["acme", "trial-*"]}, ["tenant=acme", "tenant=trial-*"]),
        ({"tenant": ("a", "b")}, ["tenant=a", "tenant=b"]),
        ({"tenant": 42}, ["tenant=42"]),  # a whole number, as a task's tenant_id=42 carries it
        ({"tenant": "acme", "region": "eu"}, ["tenant=acme", "region=eu"]),
        ({"env.stage": "a=b"}, ["env.stage=a=b"]),
    ],
)
def test_a_mapping_is_the_scope_of_the_labels_it_lists(
    mapping: dict[str, Any], listed: list[str]
) -> None:
    # When labels are given as a mapping; Then they are the NAME=VALUE labels it lists
    assert label_texts(mapping) == listed
    assert check_scope({"labels": mapping}) == check_scope({"labels": listed})
    assert check_scope({"labels": mapping}).rule.labels == frozenset(listed)


@pytest.mark.parametrize(
    ("mapping", "says"),
    [
        ({42: "acme"}, "not a label name .*: 42"),
        ({None: "acme"}, "not a label name"),
        ({("tenant",): "acme"}, "not a label name"),
        ({"ten ant": "acme"}, "not a label name"),
        ({"": "acme"}, "not a label name"),
        ({"tenant=x": "acme"}, "not a label name"),
        ({"tenant": ""}, "label 'tenant' has no value"),
        ({"tenant": "  "}, "label 'tenant' has no value"),
        ({"tenant": []}, "label 'tenant' has no value"),
        ({"tenant": ()}, "label 'tenant' has no value"),
        ({"tenant": ["acme", ""]}, "label 'tenant' has no value"),
        ({"tenant": {"acme": 1}}, "a value is a string or a whole number .*got dict"),
        ({"tenant": ["acme", {"x": 1}]}, "got dict"),
        ({"tenant": [["acme"]]}, "got list"),
        ({"tenant": {"acme"}}, "got set"),
        ({"tenant": None}, "got NoneType"),
        ({"tenant": True}, "got bool"),
        ({"tenant": 1.5}, "got float"),
        ({"tenant": [f"t{i}" for i in range(MAX_NAMES + 1)]}, "at most 100 labels"),
        ({f"l{i}": "x" for i in range(MAX_NAMES + 1)}, "at most 100 labels"),
        ({}, "labels must name at least one label"),
        ({"tenant": " acme"}, "label must be NAME=VALUE"),  # as "tenant= acme" is
        ({"tenant": "x" * 300}, "longer than 200"),
        ({"tenant": "a\x1b[2J"}, "printable"),
    ],
)
def test_a_bad_mapping_is_refused_clearly(mapping: dict[Any, Any], says: str) -> None:
    with pytest.raises(InvalidInput, match=says.replace("[", r"\[")):
        check_scope({"labels": mapping})


def test_a_mapping_in_another_dimension_is_refused_not_read_as_its_keys() -> None:
    for dimension in ("queues", "tasks", "workers"):
        with pytest.raises(InvalidInput, match=f"{dimension} must be a name or a list of names"):
            check_scope({dimension: {"a": "b"}})


def test_a_window_takes_its_labels_as_a_mapping() -> None:
    # Given windows whose labels are a mapping, and one whose mapping is bad
    app = Celery("label-mapping-windows", set_as_current=False)
    item = {"name": "trials", "schedule": 3600, "duration": 60}
    window = parse_window({**item, "labels": {"tenant": ["trial-*", "demo"]}}, app, "queue")

    # Then the first holds the labels it lists, and the other names the window and why
    assert window.scope == Scope.of(labels=["tenant=trial-*", "tenant=demo"])
    with pytest.raises(InvalidWindow, match="window 'trials': label 'tenant' has no value"):
        parse_window({**item, "labels": {"tenant": []}}, app, "queue")


@pytest.fixture
def app() -> Iterator[Celery]:
    """An app whose store is a private memory store, with label ``tenant`` configured."""
    app = Celery("label-mapping", set_as_current=False)
    app.conf.pause_store_url = f"memory://{uuid.uuid4().hex}"
    app.conf.pause_labels = {"tenant": "tenant_id"}
    yield app
    forget_all()


def test_pause_throttle_and_resume_take_labels_as_a_mapping(app: Celery) -> None:
    # When tenant A is paused and the trial tenants limited, their labels given as mappings
    paused = celery_pause.pause(app, labels={"tenant": "A"}, notify=False)
    limited = celery_pause.throttle(
        app, labels={"tenant": ("trial-*",)}, concurrency=1, notify=False
    )

    # Then the holds are those of the list form, with no warning about the label
    assert paused.hold.scope == Scope.of(labels=["tenant=A"]) and not paused.warnings
    assert limited.hold.scope == Scope.of(labels=["tenant=trial-*"])

    # When tenant A is resumed by a mapping; Then its hold is removed, and the limit stays
    resumed = celery_pause.resume(app, labels={"tenant": "A"}, notify=False)
    assert [h.id for h in resumed.removed] == [paused.hold.id] and not resumed.remaining
    assert [h.id for h in celery_pause.status(app).holds] == [limited.hold.id]

    # And a bad mapping is refused before anything is written
    with pytest.raises(InvalidInput, match="label 'tenant' has no value"):
        celery_pause.pause(app, labels={"tenant": ""}, notify=False)
    assert len(celery_pause.status(app).holds) == 1
