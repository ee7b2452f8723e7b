"""Bad input: whatever an operator types or the store holds, nothing un-pauses by accident.

Property tests (hypothesis) for duration and date parsing and for decoding the
store's keys, then the API's bounds on a real Redis store.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import celery_pause
from celery_pause.errors import InvalidInput
from celery_pause.model import validation
from celery_pause.model.coercion import MAX_DURATION, parse_datetime, parse_duration
from celery_pause.model.formatting import SHOWN_TEXT
from celery_pause.model.report import APPLIED, WorkerReport
from celery_pause.model.scope import EVERYTHING, Scope
from celery_pause.model.state import UNREADABLE, Hold, PauseState
from support.harness import Cluster

PROPERTIES = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_800_000_000.0  # store time at which the decoded states are judged

# -- strategies ---------------------------------------------------------------------------
names = st.text(min_size=1, max_size=12)
times = st.floats(min_value=0, max_value=4e9, allow_nan=False)
scopes = st.one_of(
    st.just(EVERYTHING),
    st.builds(
        lambda q, t, w: Scope.of(q, tasks=t, workers=w),
        st.one_of(st.none(), st.frozensets(names, min_size=1, max_size=4)),
        st.one_of(st.none(), st.frozensets(names, min_size=1, max_size=4)),
        st.one_of(st.none(), st.frozensets(names, min_size=1, max_size=4)),
    ),
)
holds = st.builds(
    Hold,
    scope=scopes,
    source=st.one_of(st.just("manual"), st.just("breaker:db"), names),
    paused_by=st.none() | st.text(max_size=20),
    reason=st.none() | st.text(max_size=40),
    paused_at=times,
    resume_at=st.none() | times,
    id=names,
)
states = st.builds(
    PauseState,
    generation=st.integers(min_value=0, max_value=2**63),
    holds=st.lists(holds, max_size=4).map(tuple),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
MISSING = object()

# The types each stored hold field may have; anything else is foreign.
HOLD_FIELDS: dict[str, Any] = {
    "id": lambda v: isinstance(v, str),
    "source": lambda v: isinstance(v, str),
    "paused_by": lambda v: v is None or isinstance(v, str),
    "reason": lambda v: v is None or isinstance(v, str),
    "queues": lambda v: (
        v is None or (isinstance(v, list) and bool(v) and all(isinstance(q, str) for q in v))
    ),
    "paused_at": lambda v: _finite_number(v),
    "resume_at": lambda v: v is None or _finite_number(v),
}


def _finite_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def still_paused(decoded: PauseState, original: PauseState) -> bool:
    """Every queue ``original`` pauses at NOW (or at 0) is still paused in ``decoded``."""
    for now in (0.0, NOW):
        before, after = original.paused(now), decoded.paused(now)
        if after.everything:
            continue
        if before.everything or not before.queues <= after.queues:
            return False
    return True


def unreadable(state: PauseState) -> bool:
    return any(h.source == UNREADABLE for h in state.holds) and state.paused(NOW) == EVERYTHING


# -- durations and dates ------------------------------------------------------------------
@PROPERTIES
@given(st.text(max_size=30))
@example("1e400")
@example("nan")
@example("-inf")
@example("0.0000001s")
@example("1_000")
@example("\u0661\u0662s")  # Arabic-Indic digits
def test_any_text_is_a_bounded_positive_duration_or_a_clear_error(text: str) -> None:
    # Given any text an operator may type; When it is parsed as a duration
    try:
        duration = parse_duration(text)
    except InvalidInput as exc:
        # Then it is refused with a message that quotes at most 40 characters of it
        # (escaped as repr does: at most 10 characters each, as in \U0001f600)
        assert "duration" in str(exc)
        assert len(str(exc)) < 100 + 10 * 40
        assert repr(text[:40]) in str(exc)
        return
    # ... or it is a positive duration of at most 366 days
    assert timedelta(0) < duration <= MAX_DURATION


@PROPERTIES
@given(st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from("dhms")), min_size=1, max_size=4))
def test_unit_durations_add_up(parts: list[tuple[int, str]]) -> None:
    # Given a duration written with units, e.g. 1h30m
    text = "".join(f"{number}{unit}" for number, unit in parts)
    seconds = sum(number * {"d": 86400, "h": 3600, "m": 60, "s": 1}[unit] for number, unit in parts)
    # When parsed (in upper case too)
    # Then it is their sum, or refused when that is zero or over 366 days
    for variant in (text, f"  {text.upper()} "):
        if 0 < seconds <= MAX_DURATION.total_seconds():
            assert parse_duration(variant) == timedelta(seconds=seconds)
        else:
            with pytest.raises(InvalidInput):
                parse_duration(variant)


@PROPERTIES
@given(st.text(max_size=40))
@example("0001-01-01T00:00")
@example("9999-12-31T23:59:59")
@example("2026-02-30T10:00")
@example("2026-01-28T14:00Zz")
def test_any_text_is_an_aware_date_time_or_a_clear_error(text: str) -> None:
    # Given any text; When it is parsed as a date-time
    try:
        moment = parse_datetime(text)
    except InvalidInput as exc:
        # Then it is refused with a clear message
        assert "date-time" in str(exc)
        return
    # ... or it is a date-time with a zone, which can be turned into a timestamp
    assert moment.utcoffset() is not None
    assert math.isfinite(moment.timestamp())


offsets = st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59).map(
    lambda minutes: timedelta(minutes=minutes)
)
"""UTC offsets as time zones have them: whole minutes (ISO 8601 writes no finer offset)."""


@PROPERTIES
@given(st.datetimes(timezones=st.builds(timezone, offsets)))
def test_iso_date_times_round_trip_with_their_zone(moment: datetime) -> None:
    # Given an aware date-time written in ISO 8601 (and in UTC with a Z)
    # When parsed; Then it is the same instant with the same offset
    parsed = parse_datetime(moment.isoformat())
    assert parsed == moment and parsed.utcoffset() == moment.utcoffset()
    utc = moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    assert parse_datetime(utc) == moment


@PROPERTIES
@given(st.datetimes())
def test_date_times_without_a_zone_are_local_time(moment: datetime) -> None:
    # Given a date-time without a zone; When parsed
    try:
        local = moment.astimezone()
    except (OverflowError, ValueError, OSError):
        # Then one that cannot be placed in local time is refused clearly
        with pytest.raises(InvalidInput):
            parse_datetime(moment.isoformat())
        return
    # ... and any other is that moment in this machine's time zone
    assert parse_datetime(moment.isoformat()) == local


# -- the pause state ------------------------------------------------------------------------
@PROPERTIES
@given(states)
def test_a_stored_state_reads_back_unchanged(state: PauseState) -> None:
    # Given any state; When encoded and decoded; Then it is the same state
    assert PauseState.decode(state.encode()) == state


@PROPERTIES
@given(states, st.data())
def test_a_truncated_state_pauses_every_queue(state: PauseState, data: st.DataObject) -> None:
    # Given a stored state cut short anywhere (a partial write, a damaged copy)
    raw = state.encode()
    cut = data.draw(st.integers(0, len(raw) - 1))
    # When decoded
    decoded = PauseState.decode(raw[:cut])
    # Then it counts as an unreadable hold on every queue
    assert unreadable(decoded)


@settings(PROPERTIES, max_examples=300)
@given(states.filter(lambda s: bool(s.holds)), st.data())
def test_a_hold_field_of_a_foreign_type_never_unpauses(
    state: PauseState, data: st.DataObject
) -> None:
    # Given a stored state in which one field of one hold has a foreign type, or is missing
    # (e.g. resume_at written as the string "0", as true, NaN or a number too big for a float)
    doc = json.loads(state.encode())
    hold = data.draw(st.sampled_from(doc["holds"]))
    field = data.draw(st.sampled_from(sorted(HOLD_FIELDS)))
    odd = st.sampled_from(["0", "1e3", True, float("nan"), float("-inf"), 10**400, []])
    value = data.draw(st.one_of(st.just(MISSING), odd, json_values))
    assume(value is MISSING or not HOLD_FIELDS[field](value))
    if value is MISSING:
        hold.pop(field)
    else:
        hold[field] = value
    raw = json.dumps(doc)
    # When decoded
    decoded = PauseState.decode(raw)
    # Then every queue paused before is still paused (an unreadable hold pauses every queue)
    assert still_paused(decoded, state)


@pytest.mark.parametrize(
    ("field", "value"),
    [("resume_at", "0"), ("resume_at", True), ("resume_at", float("nan")),
     ("resume_at", float("-inf")), ("resume_at", 10**400), ("paused_at", 10**400),
     ("queues", []), ("queues", "q"), ("queues", [1])],
    ids=["resume_at-str", "resume_at-true", "resume_at-nan", "resume_at--inf",
         "resume_at-huge-int", "paused_at-huge-int", "queues-empty", "queues-str", "queues-int"],
)  # fmt: skip
def test_known_foreign_values_make_an_unreadable_hold(field: str, value: Any) -> None:
    # Given a hold on queue q, never to resume, with one field of a foreign type
    hold = json.loads(PauseState(4, (Hold(scope=Scope.of(["q"]), id="h"),)).encode())
    hold["holds"][0][field] = value
    # When decoded; Then that hold is unreadable and pauses every queue
    assert unreadable(PauseState.decode(json.dumps(hold)))


@PROPERTIES
@given(st.one_of(json_values, st.sampled_from([2, 3, 1.0, True, "1", None])), states)
def test_a_foreign_document_or_future_schema_pauses_every_queue(
    value: Any, state: PauseState
) -> None:
    # Given a document written by something else: another JSON value, another schema
    # version (e.g. a newer celery-pause), a foreign generation or hold list
    doc = json.loads(state.encode())
    variants = [
        value,
        {**doc, "schema": value},
        {**doc, "generation": value},
        {**doc, "holds": value},
    ]
    for variant in variants:
        if variant == doc or (isinstance(variant, dict) and _readable_document(variant)):
            continue
        # When decoded; Then it pauses every queue
        assert unreadable(PauseState.decode(json.dumps(variant))), variant


def _readable_document(doc: dict[str, Any]) -> bool:
    schema, generation = doc.get("schema"), doc.get("generation")
    return (
        type(schema) is int and schema == 1
        and type(generation) is int and generation >= 0
        and isinstance(doc.get("holds"), list)
    )  # fmt: skip


@PROPERTIES
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
@example(b"[" * 100_000)
@example(
    b'{"schema":1,"generation":1,"holds":[{"id":"h","queues":["q"],"source":"manual","paused_at":1,"resume_at":NaN}]}'
)
@example(
    b'{"schema":1,"generation":1,"holds":[{"id":"h","queues":[],"source":"manual","paused_at":1}]}'
)
@example(b"\xff\xfe\x00")
def test_any_bytes_decode_without_error(raw: bytes) -> None:
    # Given any bytes in the state key; When decoded
    decoded = PauseState.decode(raw)
    # Then decoding never fails, and anything not a valid document pauses every queue
    try:
        doc = json.loads(raw)
        valid = isinstance(doc, dict) and _readable_document(doc)
    except (ValueError, RecursionError):
        valid = False
    if not valid:
        assert unreadable(decoded)


@PROPERTIES
@given(
    st.sampled_from(["generation", "paused_at", "resume_at", "reason", "queues", "holds"]),
    st.integers(300, 4000),
)
def test_huge_values_decode_without_error_or_unpause(field: str, size: int) -> None:
    # Given a readable state with one huge value: a number of ``size`` digits,
    # a reason of ``size`` kilobytes, ``size`` queues or ``size`` holds
    hold = Hold(scope=Scope.of(["q"]), paused_by="ops", reason="r", paused_at=NOW - 5, id="h")
    state = PauseState(3, (hold,))
    doc = json.loads(state.encode())
    huge_number = 10**size
    if field == "generation":
        doc["generation"] = huge_number
    elif field in ("paused_at", "resume_at"):
        doc["holds"][0][field] = huge_number
    elif field == "reason":
        doc["holds"][0]["reason"] = "x" * size * 1024
    elif field == "queues":
        doc["holds"][0]["queues"] = ["q", *(f"q{i}" for i in range(size))]
    else:
        doc["holds"] = doc["holds"] * size
    # When decoded
    decoded = PauseState.decode(json.dumps(doc))
    # Then nothing fails, queue q stays paused, and a hold's description stays short
    assert still_paused(decoded, state)
    assert all(len(h.describe()) < 3 * SHOWN_TEXT for h in decoded.holds)


# -- worker reports -------------------------------------------------------------------------
reports = st.builds(
    WorkerReport,
    hostname=names,
    pid=st.integers(1, 2**22),
    status=st.sampled_from(["starting", APPLIED]),
    generation=st.integers(-1, 2**63),
    paused=st.none() | st.lists(names, max_size=3).map(tuple),
    running=st.lists(names, max_size=3).map(tuple),
    held=st.integers(0, 10**6),
    seen=times,
)


@PROPERTIES
@given(reports)
def test_a_worker_report_reads_back_unchanged(report: WorkerReport) -> None:
    assert WorkerReport.decode(report.encode()) == report


@PROPERTIES
@given(st.binary(max_size=100) | st.text(max_size=100).map(str.encode))
@example(b"[" * 100_000)
@example(b"null")
def test_any_bytes_in_the_worker_reports_are_skipped_not_fatal(raw: bytes) -> None:
    # Given any bytes where a worker report should be; When decoded
    decoded = WorkerReport.decode(raw)
    # Then it is a report or None (skipped), never an exception
    assert decoded is None or isinstance(decoded, WorkerReport)


@PROPERTIES
@given(reports, st.data())
def test_a_report_field_of_any_value_is_skipped_not_fatal(
    report: WorkerReport, data: st.DataObject
) -> None:
    # Given a worker report with one field replaced by any JSON value (a huge number included)
    doc = json.loads(report.encode())
    field = data.draw(st.sampled_from(sorted(doc)))
    doc[field] = data.draw(json_values | st.sampled_from([10**400, float("inf"), "x" * 10**5]))
    # When decoded; Then it is a report or None (skipped), never an exception
    decoded = WorkerReport.decode(json.dumps(doc))
    assert decoded is None or isinstance(decoded, WorkerReport)


# -- bounds on what the API accepts, on a real Redis store ------------------------------------
def endless_queue_names() -> Iterator[str]:
    number = 0
    while True:
        number += 1
        yield f"q{number}"


BAD_PAUSES: list[tuple[dict[str, Any], str]] = [
    ({"reason": "x" * (validation.MAX_REASON + 1)}, "reason longer than 1000 characters"),
    ({"reason": 42}, "reason must be a string"),
    ({"by": "x" * (validation.MAX_OPERATOR + 1)}, "by longer than 200"),
    ({"queues": [f"q{i}" for i in range(validation.MAX_NAMES + 1)]}, "at most 100 queues"),
    ({"queues": endless_queue_names()}, "at most 100 queues"),
    ({"queues": ["q" * (validation.MAX_NAME + 1)]}, "queue name longer than 200"),
    ({"queues": []}, "at least one queue"),
    ({"queues": ["ok", " "]}, "non-empty strings"),
    ({"queues": ["ok", 7]}, "non-empty strings"),
    ({"resume_after": -1}, "positive"),
    ({"resume_after": float("inf")}, "finite"),
    ({"resume_after": float("nan")}, "positive and finite"),
    ({"resume_after": "10"}, "number of seconds"),
    ({"resume_at": float("nan")}, "finite"),
    ({"resume_at": 10**400}, "out of range"),
    ({"resume_at": datetime(2001, 1, 1, tzinfo=timezone.utc)}, "not in the future"),
    ({"resume_after": 5, "resume_at": NOW}, "not both"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_PAUSES, ids=[m for _, m in BAD_PAUSES])
def test_bad_pause_arguments_are_refused_clearly_and_change_nothing(
    redis_cluster: Cluster, kwargs: dict[str, Any], message: str
) -> None:
    # Given a cluster paused on one queue
    celery_pause.pause(redis_cluster.app, queues=["kept"], reason="before")
    before = celery_pause.status(redis_cluster.app).state
    # When a pause with a bad argument is asked for
    with pytest.raises(InvalidInput) as caught:
        celery_pause.pause(redis_cluster.app, **{"queues": ["other"], **kwargs})
    # Then it is refused with a clear message, and the stored state is untouched
    assert message in str(caught.value)
    assert len(str(caught.value)) < 300
    assert celery_pause.status(redis_cluster.app).state == before


@pytest.mark.parametrize(
    "queues", [[f"q{i}" for i in range(validation.MAX_NAMES + 1)], ["q" * 201], []]
)
def test_bad_resume_arguments_are_refused_and_change_nothing(
    redis_cluster: Cluster, queues: list[str]
) -> None:
    # Given a paused cluster
    celery_pause.pause(redis_cluster.app, reason="before")
    before = celery_pause.status(redis_cluster.app).state
    # When a resume names too many, too long or no queues; Then it is refused, nothing changes
    with pytest.raises(InvalidInput):
        celery_pause.resume(redis_cluster.app, queues=queues)
    assert celery_pause.status(redis_cluster.app).state == before


def test_the_largest_accepted_pause_is_stored_whole(redis_cluster: Cluster) -> None:
    # Given the largest reason, operator name and queue list the API accepts
    queues = [f"{i:03d}".ljust(validation.MAX_NAME, "q") for i in range(validation.MAX_NAMES)]
    reason = "r" * validation.MAX_REASON
    # When paused with them
    result = celery_pause.pause(redis_cluster.app, queues=queues, reason=reason, by="o" * 200)
    # Then the hold is stored whole and reads back equal
    stored = celery_pause.status(redis_cluster.app).holds
    assert stored == (result.hold,)
    assert stored[0].reason == reason and stored[0].scope == Scope.of(queues)
