"""``celery -A proj throttle``: limit a scope to a cluster-wide rate or concurrency."""

from __future__ import annotations

from datetime import datetime, timedelta

import click
from celery.bin.base import CeleryCommand

from .. import api
from ..api.results import PauseResult
from ..errors import InvalidInput
from ..model.formatting import format_duration, format_time
from ..model.limit import MAX_CONCURRENCY
from ..model.validation import parse_rate
from .outcome import names
from .placing import PLACING_OPTIONS, check_placing, given_options, place, placing_options
from .render import auto_resume_text


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
@click.option(
    "--cost", metavar="NAME",
    help="Count the rate in the units each task says it costs in this keyword argument or "
    "header (--cost tokens: 90000/m of tokens); a task without it costs 1.",
)  # fmt: skip
@click.option(
    "--adaptive", is_flag=True,
    help="The rate and concurrency are a ceiling: tasks that raise celery_pause.Overloaded "
    "(a 429) cut them across the cluster, and they come back by themselves.",
)  # fmt: skip
@click.option(
    "--fair", metavar="LABEL",
    help="Share the starts across the values of this label of pause_labels (--fair tenant): "
    "while more wait than can start, each value takes turns in proportion to its weight.",
)  # fmt: skip
@click.option(
    "--weight", "weights", multiple=True, metavar="VALUE=W",
    help="A value's (or glob pattern's) weight under --fair (--weight acme=3 "
    "--weight 'trial-*=0.5'); 1 for the rest.",
)  # fmt: skip
@placing_options("limit")
@click.pass_context
def throttle(
    ctx: click.Context,
    /,
    rate: str | None,
    concurrency: int | None,
    per: str | None,
    cost: str | None,
    adaptive: bool,
    fair: str | None,
    weights: tuple[str, ...],
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
    and/or --concurrency running at once, across the whole cluster; with --fair, in
    turns shared across a label's values.

    A throttle on the same scope as an earlier one replaces it; a pause beats any limit.
    `celery resume` lifts it, with the same scope rules as a pause.
    """
    if rate is None and concurrency is None and fair is None:
        raise click.UsageError(
            "give --rate (e.g. 10/s), --concurrency (e.g. 3), --fair LABEL, or some of them", ctx
        )
    check_placing(ctx, given_options(ctx, PLACING_OPTIONS))
    place(
        ctx,
        lambda progress: api.throttle(
            ctx.obj.app,
            rate=rate,
            concurrency=concurrency,
            per=per,
            cost=cost,
            adaptive=adaptive,
            fair=fair,
            weights=weights,
            reason=reason,
            by=by,
            **names(scope),
            resume_after=resume_after,
            resume_at=resume_at,
            start_at=start_at,
            strict=strict,
            wait=wait,
            timeout=timeout,
            progress=progress,
            wait_for_lost=wait_for_lost,
        ),
        wait=wait,
        what="limit",
        heading=throttle_lines,
    )


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
