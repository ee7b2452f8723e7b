"""``celery -A proj throttle``: limit a scope to a cluster-wide rate or concurrency."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta

import click
from celery import Celery
from celery.bin.base import CeleryCommand
from click.core import ParameterSource

from .. import api
from ..api.results import PauseResult
from ..errors import InvalidInput, PauseTimeout
from ..model.formatting import format_duration, format_time, printable
from ..model.limit import MAX_CONCURRENCY
from ..model.validation import parse_rate
from .commands import (
    Unconfirmed,
    app_hint,
    check_wait_options,
    confirmations,
    names,
    operator_errors,
)
from .live import LiveProgress
from .params import DateTime, Duration, check_by, check_reason, check_timeout, scope_options
from .render import auto_resume_text, timeout_lines


def check_rate(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A rate in Celery's notation (``10/s``, ``100/m``, ``5/h``) or tasks per second."""
    if value is not None:
        try:
            parse_rate(value)
        except InvalidInput as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return value


@click.command(
    cls=CeleryCommand,
    short_help="Limit task processing to a cluster-wide rate or concurrency.",
)
@click.option(
    "--rate", callback=check_rate, metavar="RATE",
    help="Starts per second across the cluster: 10/s, 100/m, 5/h, or a number per second.",
)  # fmt: skip
@click.option(
    "--concurrency", type=click.IntRange(1, MAX_CONCURRENCY), metavar="N",
    help="Most tasks of the scope running at once across the cluster.",
)  # fmt: skip
@click.option(
    "--per", metavar="LABEL",
    help="Apply the limit to each value of this label of pause_labels apart (--per tenant: "
    "every tenant its own).",
)  # fmt: skip
@click.option("--reason", callback=check_reason, help="Why, shown to everyone who looks.")
@click.option(
    "--by", callback=check_by, metavar="NAME",
    help="Who throttles, for the record (default: user@host).",
)  # fmt: skip
@scope_options
@click.option("--resume-after", type=Duration(), help="Lift the limit after DURATION.")
@click.option("--resume-at", type=DateTime(), help="Lift the limit at DATETIME (ISO 8601).")
@click.option("--start-at", type=DateTime(), help="Schedule the limit to start at DATETIME.")
@click.option(
    "--strict", is_flag=True,
    help="Refuse (exit 2, nothing written) a --tasks or -d name that matches nothing known.",
)  # fmt: skip
@click.option("--wait", is_flag=True, help="Block until every live worker applied the limit.")
@click.option(
    "--timeout", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
    callback=check_timeout, metavar="SECONDS", help="How long --wait waits (exit code 3).",
)  # fmt: skip
@click.option(
    "--wait-for-lost", is_flag=True,
    help="With --wait: also wait for lost workers until they report again (else exit 4 once "
    "they have surely fenced themselves).",
)  # fmt: skip
@click.pass_context
def throttle(
    ctx: click.Context,
    /,
    rate: str | None,
    concurrency: int | None,
    per: str | None,
    reason: str | None,
    by: str | None,
    resume_after: timedelta | None,
    resume_at: datetime | None,
    start_at: datetime | None,
    strict: bool,
    wait: bool,
    timeout: float,
    wait_for_lost: bool,
    **scope: list[str] | None,
) -> None:
    """Limit task processing instead of stopping it: every task, or the -Q queues, the
    --tasks (names or patterns) and the -d workers given, to --rate starts per second
    and/or --concurrency running at once, across the whole cluster.

    A throttle on the same scope as an earlier one replaces it; a pause beats any limit.
    `celery resume` lifts it, with the same scope rules as a pause.
    """
    if rate is None and concurrency is None:
        raise click.UsageError("give --rate (e.g. 10/s), --concurrency (e.g. 3), or both", ctx)
    if resume_after is not None and resume_at is not None:
        raise click.UsageError("--resume-after and --resume-at cannot be used together", ctx)
    given = [
        n for n in ("timeout", "wait_for_lost")
        if ctx.get_parameter_source(n) == ParameterSource.COMMANDLINE
    ]  # fmt: skip
    check_wait_options(ctx, given, wait=wait)
    app: Celery = ctx.obj.app
    progress = LiveProgress(
        stream=sys.stdout, tty=sys.stdout.isatty(), heading=throttle_lines, what="limit"
    )
    with operator_errors(ctx):
        try:
            result = api.throttle(
                app,
                rate=rate,
                concurrency=concurrency,
                per=per,
                reason=reason,
                paused_by=by,
                **names(scope),
                resume_after=resume_after,
                resume_at=resume_at,
                start_at=start_at,
                strict=strict,
                wait=wait,
                timeout=timeout,
                progress=progress if wait else None,
                wait_for_lost=wait_for_lost,
            )
        except PauseTimeout as exc:
            progress.close()
            lines = timeout_lines(exc.timeout, exc.busy, progress.last, app_hint(ctx), "limit")
            raise Unconfirmed("\n".join(printable(line) for line in lines)) from None
        progress.close()
        if not wait:  # a wait printed them before its progress
            for line in throttle_lines(result):
                ctx.obj.echo(printable(line))
        confirmations(ctx, result, waited=wait, what="limit")


def throttle_lines(result: PauseResult) -> list[str]:
    """What the limit does, from when, until when, and what it replaced."""
    hold = result.hold
    limit = hold.limit
    assert limit is not None
    head = f"Limited {hold.scope.describe()} to {limit.describe()} across the cluster"
    if hold.start_at is not None:
        ends = "" if hold.resume_at is None else f" to {format_time(hold.resume_at)}"
        lines = [
            f"{head} from {format_time(hold.began)} (in "
            f"{format_duration(hold.began - hold.paused_at)}){ends}: every worker applies it "
            f"then by itself. Cancel it before with `resume --hold {hold.id}`."
        ]
    else:
        lines = [f"{head}. {auto_resume_text(hold.resume_at, hold.paused_at)}"]
    lines.extend(f"Replaced the earlier {old.describe()}." for old in result.replaced)
    return lines
