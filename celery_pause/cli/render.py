"""What the operator reads on a terminal: status, pause and resume outcomes, progress.

Pure functions of the API's results, so the CLI stays thin and every line is
testable without a cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from ..api.document import Depths, Overview, WindowStatus, cluster_state, since
from ..api.results import ClusterStatus, PauseResult, ResumeResult
from ..model.formatting import format_duration, format_time
from ..model.ramp import describe_ramp
from ..model.report import APPLIED, LOST, WorkerReport
from ..model.scope import Scope, Target
from ..model.state import BEAT_SKIP, Hold
from ..model.usage import Usage


# -- small pieces ------------------------------------------------------------------------
def quoted(text: str) -> str:
    """``text`` in double quotes, control characters escaped (safe on a terminal)."""
    return json.dumps(text, ensure_ascii=False)


def short_id(task_id: str) -> str:
    return task_id[:8]


def task_label(report: WorkerReport, index: int, *, full: bool = False) -> str:
    task_id = report.running[index]
    name = report.running_names[index] if index < len(report.running_names) else ""
    shown = task_id if full else short_id(task_id)
    return f"{name}[{shown}]" if name else shown


def tasks_text(report: WorkerReport, *, full: bool = False, limit: int = 3) -> str:
    labels = [task_label(report, i, full=full) for i in range(len(report.running))]
    if len(labels) > limit:
        labels = [*labels[:limit], f"and {len(labels) - limit} more"]
    return ", ".join(labels)


def hold_line(hold: Hold, now: float, usage: Usage | None = None) -> str:
    parts = ["hold", hold.source, "on " + hold.scope.describe()]
    if hold.limit is not None:
        parts[0:1] = ["limit", hold.limit.describe()]
        if usage is not None:
            parts.append(f"({usage.describe(hold.limit)})")
    if hold.paused_by:
        parts.append("by " + quoted(hold.paused_by).strip('"'))
    if hold.reason:
        parts.append(quoted(hold.reason))
    if hold.beat == BEAT_SKIP:
        parts.append("beat skips its periodic tasks")
    if hold.resume_at is not None:
        parts.append(f"auto-resume in {format_duration(hold.resume_at - now)}")
    return "  ".join(parts)


def scheduled_line(hold: Hold, now: float) -> str:
    """A hold that starts later: when, for how long, and the id that cancels it."""
    parts = [hold.source, "on " + hold.scope.describe()]
    if hold.limit is not None:
        parts.insert(0, f"limit {hold.limit.describe()}")
    if hold.paused_by:
        parts.append("by " + quoted(hold.paused_by).strip('"'))
    if hold.reason:
        parts.append(quoted(hold.reason))
    when = f"starts {format_time(hold.began)} (in {format_duration(hold.began - now)})"
    if hold.resume_at is not None:
        when += f", lasts {format_duration(hold.resume_at - hold.began)}"
    parts.append(when)
    if hold.beat == BEAT_SKIP:
        parts.append("beat skips")
    parts.append(f"id {hold.id}")
    return "  ".join(parts)


def window_line(status: WindowStatus, now: float) -> str:
    """A maintenance window: its scope, schedule, and what it does now or next."""
    window = status.window
    parts = [
        window.name,
        window.scope.describe(),
        f"{format_duration(window.duration)} on {window.schedule!r}",
    ]
    if window.beat == BEAT_SKIP:
        parts.append("beat skips")
    if status.in_force is not None and status.in_force.resume_at is not None:
        parts.append(f"IN FORCE until {format_time(status.in_force.resume_at)}")
    if status.upcoming is not None:
        parts.append(f"next {format_time(status.upcoming.began)}")
    else:
        parts.append("no next occurrence")
    if status.skipped_until is not None:
        parts.append(f"occurrences before {format_time(status.skipped_until)} skipped")
    return "  ".join(parts)


def auto_resume_text(resume_at: float | None, now: float) -> str:
    if resume_at is None:
        return "No auto-resume: it lasts until resumed."
    return f"Auto-resume at {format_time(resume_at)} (in {format_duration(resume_at - now)})."


# -- pause and resume ----------------------------------------------------------------------
def pause_lines(result: PauseResult) -> list[str]:
    """One or two lines saying what the pause does, and when it ends."""
    hold = result.hold
    if hold.start_at is not None:
        lines = [scheduled_lines(hold)]
    elif hold.scope.everything:
        head = "Paused all queues: running tasks will finish, no new task will start."
    elif (rule := hold.scope.rule).tasks is None and rule.workers is None and rule.labels is None:
        them = "it" if len(hold.scope.queues) == 1 else "them"
        head = (
            f"Paused {hold.scope.describe()}: running tasks from {them} will finish, "
            f"no new task from {them} will start."
        )
    else:
        head = (
            f"Paused {hold.scope.describe()}: running tasks will finish, no new task of "
            "that scope will start; other tasks flow."
        )
    if hold.start_at is None:
        lines = [f"{head} {auto_resume_text(hold.resume_at, hold.paused_at)}"]
    if hold.beat == BEAT_SKIP:
        lines.append("Beat skips the periodic tasks of that scope while it is paused.")
    for old in result.replaced:
        lines.append(f"Replaced the earlier {old.describe()}.")
    return lines


def scheduled_lines(hold: Hold) -> str:
    """What a scheduled pause does, when, and how to cancel it."""
    ends = (
        f"auto-resume at {format_time(hold.resume_at)}"
        if hold.resume_at is not None
        else "no auto-resume"
    )
    return (
        f"Scheduled a pause of {hold.scope.describe()} from {format_time(hold.began)} "
        f"(in {format_duration(hold.began - hold.paused_at)}), {ends}: every worker applies it "
        f"then by itself. Cancel it before with `resume --hold {hold.id}`."
    )


def ramp_text(ramp: Hold) -> str:
    peak = ramp.limit.rate if ramp.limit and ramp.limit.rate else 0.0
    return (
        f"Ramping up: the start rate of {ramp.scope.describe()} rises to {peak:g} "
        f"tasks/s until {format_time(ramp.resume_at or 0.0)}, then is unlimited (a pause wins "
        "at once)."
    )


def resume_lines(result: ResumeResult, asked: Scope, *, force: bool) -> list[str]:
    """What was lifted, and whether the queues asked for now flow or what still holds them."""
    lines: list[str] = []
    if result.removed:
        removed = "; ".join(h.describe() for h in result.removed)
        lines.append(f"Resumed {asked.describe()}: removed {removed}.")
    lines.extend(ramp_text(ramp) for ramp in result.ramps)
    for hold in result.cancelled:
        lines.append(f"Cancelled the {hold.describe()} before it started.")
    if result.scheduled:
        lines.append("Still scheduled (cancel one with `resume --hold ID`):")
        lines.extend(f"  {scheduled_line(hold, result.now)}" for hold in result.scheduled)
    if not result.remaining:
        if not result.removed and not result.cancelled:
            lines.append(f"Nothing to resume: {asked.describe()} already {flow(asked)}.")
        elif result.removed:
            lines.append(f"{asked.describe().capitalize()} {flow(asked)} again.")
        return lines
    if not result.removed and not result.cancelled:
        lines.append(f"No manual hold to remove on {asked.describe()}.")
    kinds = {hold.pauses for hold in result.remaining}
    lines.append(
        "Still " + ("held" if len(kinds) > 1 else "paused" if True in kinds else "limited") + " by:"
    )
    lines.extend("  " + hold.describe() for hold in result.remaining)
    if any(h.window for h in result.remaining):
        lines.append("End a window's occurrence early with `resume --hold window:NAME`.")
    if not force and any(not h.manual and not h.window for h in result.remaining):
        lines.append("Holds not set by hand stay unless you resume with --force.")
    return lines


# -- --wait progress and timeout -------------------------------------------------------------
def progress_lines(
    workers: Sequence[WorkerReport], generation: int, what: str = "pause"
) -> list[str]:
    """Workers that confirmed the pause (or limit), and what the others still run."""
    done = [w for w in workers if w.quiet_for(generation)]
    running = sum(len(w.running) for w in workers)
    lines = [
        f"Waiting: {len(done)} of {len(workers)} workers confirmed, "
        f"{running} task{'s' if running != 1 else ''} still running"
    ]
    for report in workers:
        if report.quiet_for(generation):
            continue
        if report.silent:
            lines.append(f"  {report.hostname}  {lost_text(report)}")
        elif report.status != APPLIED or report.generation < generation:
            lines.append(f"  {report.hostname}  has not applied the {what} yet")
        else:
            lines.append(
                f"  {report.hostname}  finishing {len(report.running)}: {tasks_text(report)}"
            )
    return lines


def timeout_lines(
    timeout: float,
    busy: Mapping[str, Sequence[str]],
    last: Sequence[WorkerReport],
    hint: str,
    what: str = "pause",
) -> list[str]:
    """Which workers did not confirm, with their task ids (and names when known)."""
    reports = {w.hostname: w for w in last}
    lines = [f"{what} recorded but not confirmed within {timeout:g}s:"]
    for host, task_ids in sorted(busy.items()):
        report = reports.get(host)
        if report is not None and report.silent:
            lines.append(f"  {host} {lost_text(report)}")
            continue
        if not task_ids:
            lines.append(f"  {host} has not applied the {what}")
            continue
        if report is not None and list(report.running) == list(task_ids):
            labels = [task_label(report, i, full=True) for i in range(len(task_ids))]
        else:
            labels = list(task_ids)
        lines.append(f"  {host} still runs {len(labels)}: {', '.join(labels)}")
    stays = (
        "those tasks finish, nothing new starts"
        if what == "pause"
        else "each worker applies it when it next reads the store"
    )
    lines.append(f"The {what} stays in effect: {stays}. Follow it with `{hint} pause status`.")
    return lines


def lost_text(report: WorkerReport) -> str:
    """``lost contact 14s ago, was running 2``: a worker that stopped reporting."""
    said = f"was running {len(report.running)}" if report.running else "ran nothing in scope"
    return f"lost contact {report.silent:.0f}s ago, {said}"


def flow(scope: Scope) -> str:
    """``flows`` after a scope that reads as one thing (``queue emails``), else ``flow``."""
    return "flows" if scope.singular else "flow"


# -- status --------------------------------------------------------------------------------
def status_lines(view: Overview) -> list[str]:
    """``pause status`` as text: the state, holds, workers, queues and breakers."""
    status, depths, breakers = view.status, view.depths, view.breakers
    now = status.now
    state = cluster_state(status)
    head = f"State: {state}"
    if status.paused:
        head += f" ({status.paused.describe()})"
        began = since(status.holds)
        if began is not None:
            head += f" since {format_time(began)} ({format_duration(now - began)})"
    if status.limits:
        count = len(status.limits)
        head += f"; {count} limit{'s' if count != 1 else ''} in force"
    lines = [head]
    restored = status.state.restored
    if restored is not None:
        lines.append(f"Restored by {restored.by} at {format_time(restored.at)}: {restored.lost}")
    lines.extend("  " + hold_line(hold, now, status.usage.get(hold.id)) for hold in status.holds)
    lines.extend(parked_lines(view.parked, view.parked_values))
    lines.extend(turn_lines(view.turns))
    if status.scheduled:
        lines.append("Scheduled (cancel one with `resume --hold ID`):")
        lines.extend("  " + scheduled_line(hold, now) for hold in status.scheduled)
    if status.ramps:
        lines.append("Ramping (a pause wins at once):")
        lines.extend("  " + describe_ramp(ramp, now) for ramp in status.ramps)
    if view.windows:
        lines.append("Windows:")
        lines.extend("  " + window_line(window, now) for window in view.windows)
    lines.extend(f"Store: {status.store}: WARNING {w}" for w in status.store_warnings)
    lines.extend(workers_lines(status))
    lines.append(queues_line(status, depths))
    if breakers:
        lines.append("Breakers:")
        lines.extend("  " + breaker.describe() for breaker in breakers)
    return lines


def turn_lines(turns: Mapping[str, Mapping[str, int | None]]) -> list[str]:
    """A line for each limit with tasks waiting on the broker for their turns, by label value
    (``<others>`` for a plain limit's)."""
    return [
        f"  {sum(c or 0 for c in values.values())} task(s) of limit {hold} wait for "
        f"their turns: " + ", ".join(f"{quoted(value)} {count}" for value, count in values.items())
        for hold, values in turns.items()
        if values
    ]


def parked_lines(
    parked: Mapping[str, int | None], values: Mapping[str, Mapping[str, int | None]]
) -> list[str]:
    """A line for each hold with tasks parked on the broker (resume brings them back), by
    label value for a pause by label."""
    lines = []
    for hold, count in parked.items():
        if not count:
            continue
        line = f"  {count} task(s) of hold {hold} parked on the broker (resume brings them back)"
        by_value = values.get(hold)
        if by_value:
            line += ": " + ", ".join(f"{quoted(v)} {n}" for v, n in by_value.items())
        lines.append(line)
    return lines


def workers_lines(status: ClusterStatus) -> list[str]:
    workers = status.workers
    generation = status.state.generation
    if not workers:
        return [f"Workers: none live (reports in {status.store})"]
    states = [w.state_for(generation) for w in workers]
    in_scope = sum(len(w.running) for w in workers)
    lost = states.count(LOST)
    head = f"Workers: {len(workers) - lost} live" + (f", {lost} lost" if lost else "")
    if status.paused:
        head += f" ({states.count('paused')} paused, {in_scope} tasks running in scope)"
    lines = [head]
    host_width = max(len(w.hostname) for w in workers)
    state_width = max(len(s) for s in states)
    for report, state in zip(workers, states, strict=True):
        parts = [report.hostname.ljust(host_width), state.ljust(state_width)]
        if report.silent:
            parts.append(lost_text(report))
        if report.status == APPLIED:
            parts.append(f"applied gen {report.generation}")
            parts.append(running_text(report, paused=bool(status.paused)))
            prefetched = report.reserved - report.active
            if prefetched > 0 or report.held:
                parts.append(f"prefetched {max(prefetched, report.held)} ({report.held} held)")
            if report.waiting:
                parts.append(f"waiting for a limit {report.waiting}")
            if report.readded:
                parts.append(f"consumes paused {', '.join(report.readded)} (consumer added)")
        if report.pool and report.pool != "prefork":
            parts.append(f"pool {report.pool}")
        parts.append(f"seen {max(0.0, status.now - report.seen):.1f}s ago")
        lines.append("  " + "  ".join(parts))
    for report in workers:
        if report.pool_problem:
            lines.append(f"  WARNING {report.hostname}: {report.pool_problem}")
    return lines


def running_text(report: WorkerReport, *, paused: bool) -> str:
    """``running 8``, or while something is paused ``running 8 (2 in scope: …)``: every task
    the worker runs, and those of them a pause covers (they must finish for quiet)."""
    in_scope = len(report.running)
    text = f"running {max(report.active, in_scope)}"
    if not paused:
        return text
    return text + (f" ({in_scope} in scope: {tasks_text(report)})" if in_scope else " (0 in scope)")


def queues_line(status: ClusterStatus, depths: Depths) -> str:
    if not depths:
        return "Queues: none known"
    parts = []
    for name, waiting in sorted(depths.items()):
        count = "?" if waiting is None else f"{waiting:,}"
        mark = (
            " (paused)"
            if status.paused.covers(Target(queue=name))
            else " (partly paused)"
            if status.paused.touches(Target(queue=name))
            else ""
        )
        parts.append(f"{name} {count}{mark}")
    line = "Queues, waiting in the broker: " + "   ".join(parts)
    if any(waiting is None for waiting in depths.values()):
        line += "   (? = the broker cannot tell)"
    return line
