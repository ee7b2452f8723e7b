"""Who acts, one spelling: ``by=`` on pause, throttle and resume (checked alike), the history
recording it; the spellings of earlier releases (``paused_by=``, ``resumed_by=``) still taken."""

from __future__ import annotations

import pytest

import celery_pause
from celery_pause.errors import InvalidInput
from support.inprocess import Proj


def test_pause_throttle_and_resume_record_who_acts_as_by(proj: Proj) -> None:
    app = proj.app
    paused = celery_pause.pause(app, queues=["a"], by="ann@ops")
    limited = celery_pause.throttle(app, queues=["b"], rate="5/s", by="bob@ops")
    celery_pause.resume(app, queues=["a"], by="cy@ops")

    assert (paused.hold.paused_by, limited.hold.paused_by) == ("ann@ops", "bob@ops")
    entries = celery_pause.history(app, limit=3)
    assert [(e.action, e.by) for e in entries] == [
        ("resume", "cy@ops"),
        ("throttle", "bob@ops"),
        ("pause", "ann@ops"),
    ]


def test_a_bad_operator_is_refused_by_resume_as_by_pause(proj: Proj) -> None:
    app = proj.app
    celery_pause.pause(app, queues=["a"])
    before = celery_pause.status(app).state

    for bad, message in (("eve\x1b[31m", "by must be printable"), ("x" * 201, "by longer")):
        with pytest.raises(InvalidInput, match=message):
            celery_pause.resume(app, by=bad)
        with pytest.raises(InvalidInput, match=message):
            celery_pause.pause(app, queues=["b"], by=bad)
    assert celery_pause.status(app).state == before


def test_the_spelling_of_earlier_releases_still_works_with_a_warning(proj: Proj) -> None:
    app = proj.app
    with pytest.warns(DeprecationWarning, match="paused_by= is spelled by= now"):
        paused = celery_pause.pause(app, queues=["a"], paused_by="ann@ops")
    with pytest.warns(DeprecationWarning, match="resumed_by= is spelled by= now"):
        celery_pause.resume(app, queues=["a"], resumed_by="cy@ops")

    assert paused.hold.paused_by == "ann@ops"
    assert celery_pause.history(app, limit=1)[0].by == "cy@ops"
