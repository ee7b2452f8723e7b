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
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import click
from celery import Celery
from celery.bin.base import CeleryCommand
from click.core import ParameterSource

from .. import api
from ..api.document import PAUSED, RUNNING, cluster_state, overview
from ..api.results import PauseResult
from ..errors import (
    AlreadyPaused,
    ConfigurationError,
    InvalidInput,
    InvalidWindow,
    PauseTimeout,
    StoreError,
)
from ..history import format_history
from ..model.formatting import printable
from ..model.scope import NAMES, Scope
from ..model.state import BEAT_POLICIES
from ..settings import config_for, setting_name
from .init_store import init_store
from .live import LiveProgress, confirmed_line, lost_lines
from .params import (
    DateTime,
    Duration,
    check_by,
    check_reason,
    check_timeout,
    flag_of,
    scope_options,
    shared_store,
)
from .render import pause_lines, resume_lines, status_lines, timeout_lines
from .serve import serve

EXIT_USAGE = 2
EXIT_UNCONFIRMED = 3
EXIT_LOST = 4
EXIT_INTERRUPTED = 130
STATE_COLOURS = {RUNNING: "green", PAUSED: "red"}


# -- errors -------------------------------------------------------------------------------------
class Unconfirmed(click.ClickException):
    """The pause is recorded, but ``--wait`` ran out of time."""

    exit_code = EXIT_UNCONFIRMED


class BadWindow(click.ClickException):
    """``pause_windows`` has an entry celery-pause cannot use; nothing was read or written."""

    exit_code = EXIT_USAGE


def app_hint(ctx: click.Context) -> str:
    """``celery -A proj``, as the operator typed it, for hints."""
    name = ctx.find_root().params.get("app")
    return f"celery -A {name}" if isinstance(name, str) and name else "celery"


def masked(text: str, app: Celery) -> str:
    """``text`` with the password of the store and broker URLs replaced by ``**``."""
    urls: list[str] = [str(app.conf.broker_url or "")]
    with suppress(ConfigurationError):
        urls.append(config_for(app).store_url)
    for url in urls:
        try:
            password = urlsplit(url).password
        except ValueError:
            continue
        if password:
            text = text.replace(password, "**")
    return text


@contextmanager
def operator_errors(ctx: click.Context) -> Iterator[None]:
    """Turn celery-pause's errors into messages and exit codes, never a traceback."""
    app: Celery = ctx.obj.app
    hint = app_hint(ctx)
    shared_store(app)
    try:
        yield
    except AlreadyPaused as exc:
        holds = "\n".join("  " + hold.describe() for hold in exc.holds)
        raise click.ClickException(
            f"already paused, nothing changed:\n{holds}\n"
            f"Use --force to replace it, or `{hint} resume` first."
        ) from None
    except StoreError as exc:
        raise click.ClickException(
            masked(f"cannot use the pause store: {exc}", app)
            + f"\nNothing changed. Check {setting_name(app, 'pause_store_url')} and that the "
            "store is up."
        ) from None
    except InvalidWindow as exc:
        raise BadWindow(
            f"unusable {setting_name(app, 'pause_windows')}: {exc}\nNothing changed. Fix it in "
            "the app's configuration."
        ) from None
    except ConfigurationError as exc:
        raise click.ClickException(masked(f"celery-pause is not configured: {exc}", app)) from None
    except InvalidInput as exc:
        raise click.UsageError(str(exc), ctx) from None


# -- pause --------------------------------------------------------------------------------------
PAUSE_OPTIONS = (
    "reason", "by", *NAMES, "resume_after", "resume_at", "start_at", "beat",
    "force", "strict", "wait", "timeout", "wait_for_lost",
)  # fmt: skip


@click.group(
    invoke_without_command=True,
    short_help="Pause task processing on every worker (or some queues); `pause status`.",
)
@click.option("--reason", callback=check_reason, help="Why, shown to everyone who looks.")
@click.option(
    "--by", callback=check_by, metavar="NAME",
    help="Who pauses, for the record (default: user@host).",
)  # fmt: skip
@scope_options
@click.option(
    "--resume-after", type=Duration(),
    help="Resume automatically after DURATION: 90s, 30m, 2h, 1h30m or plain seconds.",
)  # fmt: skip
@click.option(
    "--resume-at", type=DateTime(),
    help="Resume automatically at DATETIME, ISO 8601 (2026-01-28T14:00, …T14:00Z, "
    "…T14:00+01:00); without a zone it is this machine's local time.",
)  # fmt: skip
@click.option(
    "--start-at", type=DateTime(),
    help="Schedule the pause to start at DATETIME (ISO 8601, as --resume-at); workers apply "
    "it then by themselves. --resume-after counts from the start.",
)  # fmt: skip
@click.option(
    "--beat", type=click.Choice(BEAT_POLICIES), default=None,
    help="While paused, `celery beat` skips the periodic tasks of the scope (skip) or sends "
    "them for the workers to hold (queue). Default: pause_beat_default (queue).",
)  # fmt: skip
@click.option("--force", is_flag=True, help="Replace a manual pause already in place.")
@click.option(
    "--strict", is_flag=True,
    help="Refuse (exit 2, nothing written) a --tasks or -d name that matches no task of this "
    "app or no live worker; without it such a name is recorded with a warning.",
)  # fmt: skip
@click.option(
    "--wait", is_flag=True,
    help="Block until every live worker applied the pause and runs nothing in scope "
    "(a scheduled pause: from its start).",
)  # fmt: skip
@click.option(
    "--timeout", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
    callback=check_timeout,
    metavar="SECONDS", help="How long --wait waits before giving up (exit code 3).",
)  # fmt: skip
@click.option(
    "--wait-for-lost", is_flag=True,
    help="With --wait: also wait for lost workers (stopped reporting) until they report again "
    "and confirm. Without it such a worker counts once it has surely fenced itself "
    "(pause_worker_ttl + pause_lease), and the exit code is 4.",
)  # fmt: skip
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
    given = [
        name for name in PAUSE_OPTIONS
        if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE
    ]  # fmt: skip
    if ctx.invoked_subcommand is not None:
        if given:
            option = flag_of(ctx, given[0])
            raise click.UsageError(
                f"{option} belongs to `pause` itself, not to `pause {ctx.invoked_subcommand}`",
                ctx,
            )
        return
    if resume_after is not None and resume_at is not None:
        raise click.UsageError(
            "--resume-after and --resume-at cannot be used together: give one", ctx
        )
    check_wait_options(ctx, given, wait=wait)
    if start_at is not None and resume_at is not None and resume_at <= start_at:
        raise click.UsageError("--resume-at must come after --start-at", ctx)

    app: Celery = ctx.obj.app
    stream = sys.stdout
    progress = LiveProgress(stream=stream, tty=stream.isatty())
    if wait and start_at is not None:
        ctx.obj.echo(f"Scheduling the pause; waiting for its start at {start_at.isoformat()}…")
    with operator_errors(ctx):
        try:
            result = api.pause(
                app,
                reason=reason,
                paused_by=by,
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
            )
        except PauseTimeout as exc:
            progress.close()
            lines = timeout_lines(exc.timeout, exc.busy, progress.last, app_hint(ctx))
            raise Unconfirmed("\n".join(printable(line) for line in lines)) from None
        except KeyboardInterrupt:
            progress.close()
            ctx.obj.error("Stopped waiting. The pause stays in effect.")
            ctx.exit(EXIT_INTERRUPTED)
        progress.close()
        if not wait:
            for line in pause_lines(result):
                ctx.obj.echo(printable(line))
        confirmations(ctx, result, waited=wait)


def check_wait_options(ctx: click.Context, given: list[str], *, wait: bool) -> None:
    """Refuse ``--timeout`` and ``--wait-for-lost`` without ``--wait``."""
    for name in ("timeout", "wait_for_lost"):
        if name in given and not wait:
            raise click.UsageError(f"{flag_of(ctx, name)} applies only with --wait", ctx)


def names(scope: dict[str, list[str] | None]) -> dict[str, Any]:
    """The names given per dimension, as keyword arguments of the Python API."""
    return {name: scope[name] for name in NAMES}


def confirmations(
    ctx: click.Context, result: PauseResult, *, waited: bool, what: str = "pause"
) -> None:
    """Say who confirmed the pause (or limit), or warn that no live worker is there to
    apply it; after a wait that counted lost workers, name them and exit 4."""
    warning = ctx.obj.style("Warning:", fg="yellow", bold=True)
    for text in result.warnings:
        ctx.obj.error(f"{warning} {printable(text)}.")
    status = api.status(ctx.obj.app)
    workers = result.workers if waited else status.workers
    if not workers:
        later = "start paused" if what == "pause" else "apply it from their first task"
        ctx.obj.error(
            f"{warning} no live worker reports to {status.store}. The {what} is "
            f"recorded: workers that start later {later}."
        )
    elif waited:
        ctx.obj.echo(confirmed_line(result, what))
        if result.lost:
            first, *rest = lost_lines(result, app_hint(ctx), what)
            ctx.obj.error(f"{warning} {printable(first)}")
            for line in rest:
                ctx.obj.error(printable(line))
            ctx.exit(EXIT_LOST)


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
@click.pass_context
def resume(
    ctx: click.Context,
    /,
    hold_id: str | None,
    force: bool,
    ramp: timedelta | None,
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
        )
    asked = Scope.of_names(dict(scope))
    if hold_id is not None:
        lifted = (*result.removed, *result.cancelled)
        asked = lifted[0].scope if lifted else asked
    for line in resume_lines(result, asked, force=force):
        ctx.obj.echo(printable(line))
