"""The ramped-resume benchmark's figure (``python -m bench.ramp --plot``); needs matplotlib."""

from __future__ import annotations

from bisect import bisect_right
from pathlib import Path
from typing import Any

from support.holds import Curve, curve


def lead(times: list[float], grid: list[float], ramp: Curve) -> list[float]:
    """At each time of ``grid``, the starts made by then less the curve's allowance."""
    return [bisect_right(times, t) - ramp.allowance(t) for t in grid]


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, or exit with how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit(
            "python -m bench.ramp --plot needs matplotlib: pip install 'celery-pause[bench]' "
            "(or pip install matplotlib)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(raw: dict[str, Any], found: dict[str, Any], path: Path) -> None:
    """Starts per second against the curve; cumulative starts against the allowance
    (beside the plain resume); how far ahead of it the cluster ran; each worker's starts."""
    plt = pyplot()
    r, s, bins = raw["ramp"], raw["settings"], found["bins"]
    ramp = curve(0.0, r["duration"], r["peak"])
    n, end = s["workers"], ramp.duration
    ramped, plain = raw["starts"]["ramped"], raw["starts"]["plain"]
    last = max(ramped["t"][-1], end) + 1.0
    curve_t = [end * i / 200 for i in range(201)]

    fig = plt.figure(figsize=(10, 11.5))
    grid_spec = fig.add_gridspec(3, 4, height_ratios=[3, 3, 2.4])
    rate = fig.add_subplot(grid_spec[0, :])
    total = fig.add_subplot(grid_spec[1, :], sharex=rate)
    ahead_ax = fig.add_subplot(grid_spec[2, :3], sharex=rate)
    workers = fig.add_subplot(grid_spec[2, 3])
    fig.suptitle(
        f"Ramped resume: {s['workers']} prefork workers x {s['concurrency']}, "
        f"{s['tasks']} tasks, {end:g} s ramp to {ramp.peak:g} tasks/s",
        fontsize=12,
    )

    # Starts per second, per bin, against the curve's rate.
    width = bins["width_s"]
    left = bins["edges_s"][:-1]
    measured = bins["measured_per_s"]
    top = ramp.peak * 1.6
    rate.bar(
        left,
        [min(m, top) for m in measured],
        width=width,
        align="edge",
        color="#4c72b0",
        alpha=0.75,
        label=f"measured, per {width:g} s bin",
    )
    rate.plot(
        curve_t,
        [ramp.rate(t) for t in curve_t],
        color="#c44e52",
        lw=2,
        label="ideal: the ramp's rate",
    )
    for x, m in zip(left, measured, strict=True):
        if m > top:
            rate.annotate(
                f"{m:.0f}/s",
                (x + width / 2, top),
                xytext=(0, -14),
                textcoords="offset points",
                ha="center",
                fontsize=8,
            )
    rate.axvline(end, color="grey", ls="--", lw=1)
    rate.text(end, top * 0.75, "ramp ends:\nunlimited  ", ha="right", fontsize=8, color="grey")
    first = found["first_second"]
    rate.text(
        0.02,
        0.97,
        f"first second: {first['ramped']} starts ramped, {first['plain']} after a plain resume",
        transform=rate.transAxes,
        va="top",
        fontsize=9,
        bbox={"facecolor": "white", "edgecolor": "#cccccc"},
    )
    rate.set_ylim(0, top)
    rate.set_ylabel("task starts / s (cluster)")
    rate.legend(loc="center left", fontsize=9)

    # Cumulative starts against the allowance, and the plain resume's.
    allowance = [ramp.allowance(t) for t in curve_t]
    total.fill_between(
        curve_t,
        allowance,
        [a + 1 for a in allowance],
        color="#c44e52",
        alpha=0.15,
        label="curve + 1 start",
    )
    total.plot(curve_t, allowance, color="#c44e52", lw=2, label="ideal: the curve's allowance")
    count = range(1, len(ramped["t"]) + 1)
    total.step(ramped["t"], count, where="post", color="#4c72b0", lw=1.5, label="measured, ramped")
    total.step(
        plain["t"],
        range(1, len(plain["t"]) + 1),
        where="post",
        color="#55a868",
        lw=1.5,
        label="plain resume of an equal backlog",
    )
    ahead = found["ahead"]
    total.text(
        0.98,
        0.04,
        f"furthest ahead of the curve: {ahead['max_starts']:g} starts (at {ahead['at_s']:g} s)\n"
        f"furthest behind: {found['max_behind_starts']:g} starts",
        transform=total.transAxes,
        ha="right",
        fontsize=9,
        bbox={"facecolor": "white", "edgecolor": "#cccccc"},
    )
    total.set_ylabel("task starts since the resume")
    total.legend(loc="upper left", fontsize=9)

    # How far ahead of the curve (below zero: behind it) the cluster ran.
    grid = [end * i / 4000 for i in range(4001)]
    ahead_ax.axhline(1, color="grey", ls=":", lw=1)
    ahead_ax.axhline(0, color="#c44e52", lw=1.5)
    ahead_ax.plot(grid, lead(ramped["t"], grid, ramp), color="#4c72b0", lw=0.8)
    groups = found["groups"]
    ahead_ax.text(
        0.99,
        0.96,
        "dotted: +1 start\n"
        f"{groups['count']} groups of starts, median size {groups['median_size']:g}, "
        f"each within {groups['max_spread_ms']:g} ms",
        transform=ahead_ax.transAxes,
        ha="right",
        va="top",
        fontsize=8,
        bbox={"facecolor": "white", "edgecolor": "#cccccc"},
    )
    ahead_ax.set_ylim(-3, 3)
    ahead_ax.set_ylabel("cluster starts\nahead of the curve")
    ahead_ax.set_xlabel("seconds since the resume (store time)")
    for ax in (rate, total, ahead_ax):
        ax.grid(alpha=0.3)
        ax.set_xlim(0, last)
    plt.setp(rate.get_xticklabels() + total.get_xticklabels(), visible=False)

    # Each worker's starts, during the ramp (beside an equal share, for reference) and after.
    names = list(found["per_worker"])
    during = [w["during_ramp"] for w in found["per_worker"].values()]
    after = [w["total"] - w["during_ramp"] for w in found["per_worker"].values()]
    workers.bar(names, during, color="#4c72b0", label="in the ramp")
    workers.bar(names, after, bottom=during, color="#a1c9f4", label="after its end")
    share = ramp.allowance(end) / n
    workers.axhline(share, color="#c44e52", lw=1.5, label=f"an equal share: {share:g}")
    for x, count in enumerate(during):
        workers.text(x, count / 2, str(count), ha="center", color="white", fontsize=8)
    workers.set_ylabel("starts per worker")
    workers.legend(loc="lower right", fontsize=7)
    workers.grid(alpha=0.3, axis="y")

    c = raw["conditions"]
    fig.text(
        0.01,
        0.005,
        f"{c['date']}, {c['cpus']} CPUs shared with other work (load {c['load_before'][0]} "
        f"before, {c['load_after'][0]} after); celery {c['celery']}, Redis broker",
        fontsize=7,
        color="grey",
    )
    fig.tight_layout(rect=(0, 0.015, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
