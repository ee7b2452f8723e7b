"""The operator CLI: ``celery -A proj pause``, ``… resume`` and ``… pause status``.

Registered through the ``celery.commands`` entry points. ``pause`` is a group
whose own callback pauses; its sub-commands (``status``) report. Add one with
``@pause.command(cls=CeleryCommand)``.

Exit codes: 0 done; 1 refused or failed (already paused, store unreachable,
not configured); 2 usage error or an unusable ``pause_windows`` entry; 3 pause
recorded but not confirmed by ``--wait`` in time; 4 confirmed by ``--wait`` but
for lost workers, fenced (nothing in scope starts; their tasks may still be
finishing); 130 interrupted while waiting (the pause stays).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import click
from celery import Celery
from celery.bin.base import CeleryCommand

from .. import api
from ..api.document import PAUSED, RUNNING, cluster_state, overview
from ..history import format_history
from ..model.formatting import printable
from ..model.scope import NAMES, Scope
from ..model.state import BEAT_POLICIES
from .init_store import init_store
from .outcome import names, operator_errors
from .params import Duration, by_option, flag_of, scope_options
from .placing import PLACING_OPTIONS, check_placing, given_options, place, placing_options
from .render import pause_lines, resume_lines, status_lines
from .serve import serve

STATE_COLOURS = {RUNNING: "green", PAUSED: "red"}


# -- pause --------------------------------------------------------------------------------------
PAUSE_OPTIONS = (*PLACING_OPTIONS, *NAMES, "beat", "force")
"""The parameters of ``pause`` itself, which its sub-commands (``status``) refuse."""


@click.group(
    invoke_without_command=True,
    short_help="Pause task processing on every worker (or some queues); `pause status`.",
)
@placing_options("pause")
@click.option(
    "--beat", type=click.Choice(BEAT_POLICIES), default=None,
    help="While paused, `celery beat` skips the periodic tasks of the scope (skip) or sends "
    "them for the workers to hold (queue). Default: pause_beat_default (queue).",
)  # fmt: skip
@click.option("--force", is_flag=True, help="Replace a manual pause already in place.")
@click.pass_context
def pause(
    ctx: click.Context,
    /,
    reason: str | None,
    by: str | None,
    resume_after: timedelta | None,
    resume_at: datetime | None,
    start_at: datetime | None,
    beat: str | None,
    force: bool,
    strict: bool,
    wait: bool,
    timeout: float,
    wait_for_lost: bool,
    **scope: list[str] | None,
) -> None:
    """Pause task processing: every task on every worker, or the -Q queues, the --tasks
    (names or patterns) and the -d workers given (each dimension narrows the pause).

    Running tasks finish; no new task starts (prefetched and ETA tasks included)
    until `celery resume` or the auto-resume time. Workers started later start
    paused. With --start-at the pause is scheduled: workers apply it at that time.
    `celery pause status` shows the state.
    """
    given = given_options(ctx, PAUSE_OPTIONS)
    if ctx.invoked_subcommand is not None:
        if given:
            option = flag_of(ctx, given[0])
            raise click.UsageError(
                f"{option} belongs to `pause` itself, not to `pause {ctx.invoked_subcommand}`",
                ctx,
            )
        return
    check_placing(ctx, given)
    if wait and start_at is not None:
        ctx.obj.echo(f"Scheduling the pause; waiting for its start at {start_at.isoformat()}…")
    place(
        ctx,
        lambda progress: api.pause(
            ctx.obj.app,
            reason=reason,
            by=by,
            **names(scope),
            resume_after=resume_after,
            resume_at=resume_at,
            start_at=start_at,
            beat=beat,
            force=force,
            strict=strict,
            wait=wait,
            timeout=timeout,
            progress=progress,
            wait_for_lost=wait_for_lost,
        ),
        wait=wait,
        what="pause",
        heading=pause_lines,
    )


@pause.command(cls=CeleryCommand)
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON document (schema 1, in the CLI reference)."
)
@click.option(
    "--history", "with_history", is_flag=True,
    help="Also show the recorded pauses and resumes, newest first.",
)  # fmt: skip
@click.pass_context
def status(ctx: click.Context, as_json: bool, with_history: bool) -> None:
    """Show the holds, every live worker and the queues."""
    app: Celery = ctx.obj.app
    with operator_errors(ctx):
        view = overview(app, with_history=with_history)
    if as_json:
        click.echo(json.dumps(view.to_json(), indent=2))
        return
    lines = [printable(line) for line in status_lines(view)]
    state = cluster_state(view.status)
    coloured = ctx.obj.style(state, fg=STATE_COLOURS.get(state, "yellow"), bold=True)
    lines[0] = lines[0].replace(state, coloured, 1)
    if view.history is not None:
        lines.extend(printable(line) for line in format_history(view.history).splitlines())
    for line in lines:
        ctx.obj.echo(line)


pause.add_command(serve)
pause.add_command(init_store)


# -- resume -------------------------------------------------------------------------------------
@click.command(cls=CeleryCommand, short_help="Resume the queues paused by hand.")
@scope_options
@click.option(
    "--hold", "hold_id", metavar="ID",
    help="Lift exactly this hold (ids in `pause status`): cancel a scheduled pause, or end "
    "a window's occurrence early or skip its next one (window:NAME).",
)  # fmt: skip
@click.option(
    "--force", is_flag=True,
    help="Remove every hold in scope, those of circuit breakers too.",
)  # fmt: skip
@click.option(
    "--ramp", type=Duration(),
    help="Resume gradually: over this time (e.g. 10m, at most 1d) the start rate rises "
    "to pause_ramp_peak tasks/s, then is unlimited.",
)  # fmt: skip
@by_option("Who resumes")
@click.pass_context
def resume(
    ctx: click.Context,
    /,
    hold_id: str | None,
    force: bool,
    ramp: timedelta | None,
    by: str | None,
    **scope: list[str] | None,
) -> None:
    """Resume what was paused by hand: everything, or within the -Q queues, --tasks and -d
    workers given; or lift one hold by id (--hold).

    Says whether the queues now flow, or what still holds them.
    """
    if hold_id is not None and any(scope.values()):
        *others, last = (flag_of(ctx, name, short=True) for name in NAMES)
        flags = f"{', '.join(others)} or {last}"
        raise click.UsageError(f"--hold lifts one hold: give it without {flags}", ctx)
    with operator_errors(ctx):
        result = api.resume(
            ctx.obj.app,
            **names(scope),
            hold=hold_id,
            force=force,
            ramp=ramp,
            by=by,
        )
    asked = Scope.of_names(dict(scope))
    if hold_id is not None:
        lifted = (*result.removed, *result.cancelled)
        asked = lifted[0].scope if lifted else asked
    for line in resume_lines(result, asked, force=force):
        ctx.obj.echo(printable(line))
