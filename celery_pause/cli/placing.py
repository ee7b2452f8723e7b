"""What ``pause`` and ``throttle`` share: one option stack, its checks, and one way to place the
hold and say what came of it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import click
from click.core import ParameterSource

from ..api.holding import Progress
from ..api.results import PauseResult
from ..errors import PauseTimeout
from ..model.formatting import printable
from .live import LiveProgress
from .outcome import (
    EXIT_INTERRUPTED,
    Unconfirmed,
    app_hint,
    check_wait_options,
    confirmations,
    operator_errors,
)
from .params import (
    Command,
    DateTime,
    Duration,
    by_option,
    check_reason,
    check_timeout,
    scope_options,
)
from .render import timeout_lines

WORDS = {
    "pause": {
        "by": "Who pauses",
        "end": "Resume automatically",
        "wait": "applied the pause and runs nothing in scope (a scheduled pause: from its start)",
    },
    "limit": {
        "by": "Who throttles",
        "end": "Lift the limit",
        "wait": "applied the limit (a scheduled limit: from its start)",
    },
}
"""How the shared options speak of a pause and of a limit."""
PLACING_OPTIONS = (
    "reason", "by", "resume_after", "resume_at", "start_at",
    "strict", "wait", "timeout", "wait_for_lost",
)  # fmt: skip
"""The parameters :func:`placing_options` adds, beside the scope's."""


def placing_options(what: str) -> Callable[[Command], Command]:
    """``--reason``, ``--by``, the scope (``-Q``, ``--tasks``, ``-d``, ``--labels``), when it
    starts and ends, ``--strict`` and the ``--wait`` stack, worded for a ``what`` (``pause``,
    ``limit``)."""
    words = WORDS[what]
    options = [
        click.option("--reason", callback=check_reason, help="Why, shown to everyone who looks."),
        by_option(words["by"]),
        scope_options,
        click.option(
            "--resume-after", type=Duration(),
            help=f"{words['end']} after DURATION: 90s, 30m, 2h, 1h30m or plain seconds.",
        ),
        click.option(
            "--resume-at", type=DateTime(),
            help=f"{words['end']} at DATETIME, ISO 8601 (2026-01-28T14:00, …T14:00Z, "
            "…T14:00+01:00); without a zone it is this machine's local time.",
        ),
        click.option(
            "--start-at", type=DateTime(),
            help=f"Schedule the {what} to start at DATETIME (ISO 8601, as --resume-at); workers "
            "apply it then by themselves. --resume-after counts from the start.",
        ),
        click.option(
            "--strict", is_flag=True,
            help="Refuse (exit 2, nothing written) a --tasks or -d name that matches no task of "
            "this app or no live worker; without it such a name is recorded with a warning.",
        ),
        click.option(
            "--wait", is_flag=True, help=f"Block until every live worker {words['wait']}."
        ),
        click.option(
            "--timeout", type=click.FloatRange(min=0, min_open=True), default=30.0,
            show_default=True, callback=check_timeout, metavar="SECONDS",
            help="How long --wait waits before giving up (exit code 3).",
        ),
        click.option(
            "--wait-for-lost", is_flag=True,
            help="With --wait: also wait for lost workers (stopped reporting) until they report "
            "again and confirm. Without it such a worker counts once it has surely fenced "
            "itself (pause_worker_ttl + pause_lease), and the exit code is 4.",
        ),
    ]  # fmt: skip

    def decorate(command: Command) -> Command:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def check_placing(ctx: click.Context, given: Sequence[str]) -> None:
    """Refuse what the shared options cannot mean together (``given``: the parameters on the
    command line)."""
    params = ctx.params
    if params["resume_after"] is not None and params["resume_at"] is not None:
        raise click.UsageError(
            "--resume-after and --resume-at cannot be used together: give one", ctx
        )
    check_wait_options(ctx, list(given), wait=params["wait"])
    start, end = params["start_at"], params["resume_at"]
    if start is not None and end is not None and end <= start:
        raise click.UsageError("--resume-at must come after --start-at", ctx)


def given_options(ctx: click.Context, names: Sequence[str]) -> list[str]:
    """Which of the parameters ``names`` the operator gave on the command line."""
    return [name for name in names if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE]


def place(
    ctx: click.Context,
    call: Callable[[Progress | None], PauseResult],
    *,
    wait: bool,
    what: str,
    heading: Callable[[PauseResult], list[str]],
) -> None:
    """Place the hold with ``call`` (given the live progress of a wait), and say what came of
    it: the hold (``heading``), who confirmed, or why the wait ended."""
    progress = LiveProgress(stream=sys.stdout, tty=sys.stdout.isatty(), heading=heading, what=what)
    with operator_errors(ctx):
        try:
            result = call(progress if wait else None)
        except PauseTimeout as exc:
            progress.close()
            lines = timeout_lines(exc.timeout, exc.busy, progress.last, app_hint(ctx), what)
            raise Unconfirmed("\n".join(printable(line) for line in lines)) from None
        except KeyboardInterrupt:
            progress.close()
            ctx.obj.error(f"Stopped waiting. The {what} stays in effect.")
            ctx.exit(EXIT_INTERRUPTED)
        progress.close()
        if not wait:  # a wait printed them before its progress
            for line in heading(result):
                ctx.obj.echo(printable(line))
        confirmations(ctx, result, waited=wait, what=what)
