"""Decoding the workers' reports: the fast paths give what a plain ``json.loads`` and
dataclass construction give, for the reports workers write and for damaged entries."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from celery_pause.model.report import APPLIED, WorkerReport, known


def reference(raw: bytes | str) -> WorkerReport | None:
    """The decoding as it was before the fast paths: ``json.loads`` and the constructor."""
    try:
        data: dict[str, Any] = json.loads(raw)
        paused = data.get("paused")
        lists = (data.get("running", []), data.get("running_names", []), data.get("breakers", []))
        if not all(isinstance(v, list) for v in lists) or not isinstance(
            paused, (list, type(None))
        ):
            raise TypeError("not lists")
        return WorkerReport(
            hostname=str(data["hostname"]),
            pid=int(data["pid"]),
            status=str(data["status"]),
            generation=int(data["generation"]),
            paused=None if paused is None else tuple(str(q) for q in paused),
            running=tuple(str(t) for t in data.get("running", ())),
            held=int(data.get("held", 0)),
            active=int(data.get("active", 0)),
            reserved=int(data.get("reserved", 0)),
            waiting=int(data.get("waiting", data.get("ramping", 0))),
            seen=float(data["seen"]),
            running_names=tuple(str(n) for n in data.get("running_names", ())),
            breakers=tuple(str(n) for n in data.get("breakers", ())),
            pool=str(data.get("pool", "")),
            pool_problem=str(data.get("pool_problem", "")),
            as_of=float(data.get("as_of", 0.0)),
        )
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError):
        return None


names = st.text(alphabet='ab{}[],:"\\ 1é', max_size=6)
reports = st.builds(
    WorkerReport,
    hostname=names,
    pid=st.integers(0, 2**31),
    status=st.sampled_from([APPLIED, "starting"]),
    generation=st.integers(-1, 10),
    paused=st.none() | st.lists(names, max_size=2).map(tuple),
    running=st.lists(names, max_size=2).map(tuple),
    running_names=st.lists(names, max_size=2).map(tuple),
    seen=st.floats(0, 2e9),
    pool=names,
    as_of=st.floats(0, 2e9),
)
# Pieces of reports and junk: braces, brackets, quotes and commas that could make entries
# joined into one array parse differently from each entry on its own.
junk = st.sampled_from(
    ['{"a":"x}', '{"}', '{"hostname":"b"},{"c":1}', "[1", "2]", '"q', "", "{}", "1,2", "null"]
)


def entry(value: WorkerReport | str, as_bytes: bool) -> bytes | str:
    raw = value.encode()
    return raw if as_bytes else raw.decode()


@given(st.lists(reports | junk, max_size=8), st.booleans())
def test_decode_all_is_decode_of_each(values: list[WorkerReport | str], as_bytes: bool) -> None:
    raws = [entry(value, as_bytes) for value in values]
    expected = [r for r in map(reference, raws) if r is not None]
    assert WorkerReport.decode_all(raws) == expected
    assert [r for r in map(WorkerReport.decode, raws) if r is not None] == expected


@given(reports)
def test_a_report_decodes_to_itself_with_every_field(report: WorkerReport) -> None:
    decoded = WorkerReport.decode(report.encode())
    assert decoded == report
    assert decoded is not None and all(hasattr(decoded, f.name) for f in fields(report))


def test_entries_merged_by_a_join_are_each_unreadable() -> None:
    """Two halves that make one report when joined, and one entry holding two: neither
    is a report on its own, so none is one in a batch either."""
    whole = WorkerReport(hostname="w", pid=1, seen=1.0)
    data = json.dumps({**json.loads(whole.encode()), "pool": "x},{"})
    first, second = data.split("},{", 1)
    two = whole.encode().decode() + "," + replace(whole, hostname="v").encode().decode()
    raws = [first + "}", "{" + second, two, whole.encode().decode()]
    assert WorkerReport.decode_all(raws) == [whole]


def test_known_marks_silent_reports_as_replace_did() -> None:
    live = WorkerReport(hostname="b", pid=1, seen=95.0)
    stale = WorkerReport(hostname="a", pid=2, seen=50.0)
    gone = WorkerReport(hostname="c", pid=3, seen=1.0)
    found = known([live, gone, stale], 100.0, ttl=10.0, forget=60.0)
    assert found == [replace(stale, silent=50.0), live]
    assert type(found[0]) is WorkerReport and found[0].silent == 50.0


def test_a_report_of_an_earlier_release_says_waiting_as_ramping() -> None:
    # Given a report an earlier release wrote: its waiting requests under ``ramping``
    report = WorkerReport("w1@h", 1, APPLIED, 3, (), (), 0, 100.0, waiting=4)
    data = json.loads(report.encode())
    earlier = {**{k: v for k, v in data.items() if k != "waiting"}, "ramping": 4}

    # Then it reads the same; this release writes ``waiting``, and ``ramping`` too for the
    # earlier release's readers during an upgrade
    assert WorkerReport.decode(json.dumps(earlier)) == report
    assert data["waiting"] == data["ramping"] == 4
