"""bench.adaptive's figures from the calls the downstream answered: goodput and the 429 share
per phase, calls inside a Retry-After, and the table (no worker, no server: the unit tier
checks what each figure counts)."""

from __future__ import annotations

from typing import Any

from bench.stats import aligned
from support.downstream import Call

CAPACITIES = (40.0, 20.0, 60.0)
"""The downstream's calls a second, one phase each."""
PHASE = 40.0
"""Seconds each capacity lasts."""
SETTLE = 15.0
"""Seconds after each change before the figures count."""
RETRY_AFTER = 1.0
GRACE = 0.1
"""Seconds after a 429 a call may still come (its task started before the pause arrived)."""


def analyse(raw: dict[str, Any]) -> dict[str, Any]:
    """Per run and phase: goodput against capacity and the 429 share from :data:`SETTLE`
    seconds after the change; for the adaptive run, the calls inside a Retry-After."""
    phase = raw["settings"]["phase_s"]
    found: dict[str, Any] = {}
    for name, run_ in raw["runs"].items():
        answered = [Call(at, bool(ok), "") for at, ok in run_["calls"]]
        phases = []
        for i, capacity in enumerate(CAPACITIES):
            start, end = i * phase + min(SETTLE, phase / 2), (i + 1) * phase
            inside = [c for c in answered if start <= c.at < end]
            good = sum(c.ok for c in inside) / (end - start)
            phases.append(
                {
                    "capacity": capacity,
                    "goodput": round(good, 1),
                    "of_capacity": round(good / capacity, 3),
                    "share_429": round(sum(not c.ok for c in inside) / max(1, len(inside)), 3),
                }
            )
        found[name] = {
            "phases": phases,
            "inside_retry_after": inside_retry_after(answered),
            "gave_up": run_["gave_up"],
        }
    return found


def inside_retry_after(answered: list[Call]) -> dict[str, Any]:
    """Calls that came inside a Retry-After more than :data:`GRACE` after the 429 asking
    for it, and the latest any came after such a 429."""
    refused = [c.at for c in answered if not c.ok]
    late, latest = 0, 0.0
    j = 0
    for call in answered:
        while j < len(refused) and refused[j] + RETRY_AFTER <= call.at:
            j += 1
        asked = [t for t in refused[j:] if t < call.at]
        if asked:
            since = call.at - asked[0]
            latest = max(latest, since) if since < GRACE else latest
            late += since >= GRACE
    return {
        "429": len(refused),
        "later_than_grace": late,
        "latest_within_grace_s": round(latest, 3),
    }


def per_second(calls: list[list[float]]) -> list[list[int]]:
    """Calls answered 200 and 429 in each whole second of the schedule."""
    counts = [[0, 0] for _ in range(int(max((at for at, _ in calls), default=0.0)) + 1)]
    for at, ok in calls:
        counts[int(at)][0 if ok else 1] += 1
    return counts


def table(figures: dict[str, Any]) -> str:
    rows: list[tuple[str, ...]] = [
        ("", "adaptive (--rate 200/s --adaptive)", "autoretry_for + retry_backoff")
    ]
    for i, capacity in enumerate(CAPACITIES):
        for label, key in (("goodput / capacity", "of_capacity"), ("429 share", "share_429")):
            rows.append(
                (
                    f"{capacity:g}/s: {label}",
                    *(str(figures[name]["phases"][i][key]) for name in ("adaptive", "autoretry")),
                )
            )
    rows.append(
        (
            "tasks failed, their retries spent",
            "none (a refused task goes back unchanged)",
            str(figures["autoretry"]["gave_up"]),
        )
    )
    inside = [figures[name]["inside_retry_after"] for name in ("adaptive", "autoretry")]
    rows.append(
        (
            "calls inside a Retry-After > 0.1 s after its 429",
            *(f"{r['later_than_grace']} (of {r['429']} 429s)" for r in inside),
        )
    )
    return aligned(rows)
