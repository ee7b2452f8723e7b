"""The CLI's option types and checks, thin wrappers of :mod:`celery_pause.model.validation`."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar

import click
from celery import Celery

from ..errors import ConfigurationError, InvalidInput
from ..model.coercion import duration, moment, name_list
from ..model.scope import DIMENSIONS
from ..model.validation import check_names
from ..model.validation import check_reason as check_reason_text
from ..settings import config_for, setting_name

Command = TypeVar("Command", bound=Callable[..., Any])


# ParamType is generic from click 8.2 on, a plain class before: no subscript here.
class Duration(click.ParamType):  # type: ignore[type-arg]
    """``90s``, ``30m``, ``2h``, ``1h30m`` or plain seconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return duration(value, param.name if param and param.name else "duration")
        except InvalidInput as exc:
            self.fail(str(exc), param, ctx)


class DateTime(click.ParamType):  # type: ignore[type-arg]
    """ISO 8601, local time without a zone; must lie ahead."""

    name = "datetime"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            at = moment(value, param.name if param and param.name else "datetime")
        except InvalidInput as exc:
            self.fail(str(exc), param, ctx)
        if at <= datetime.now(timezone.utc):
            self.fail(f"{value!r} is in the past", param, ctx)
        return at


class NameList(click.ParamType):  # type: ignore[type-arg]
    """Comma-separated names of ``kind`` (queue, task or worker), none of them empty."""

    name = "a,b"

    def __init__(self, kind: str = "queue") -> None:
        self.kind = kind

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return check_names(name_list(value, self.kind), self.kind)
        except InvalidInput as exc:
            self.fail(str(exc), param, ctx)


def check_reason(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    try:
        return check_reason_text(value)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def check_timeout(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not math.isfinite(value):
        raise click.BadParameter("must be a finite number of seconds", ctx, param)
    return value


def check_by(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise click.BadParameter("must name who acts, e.g. alice@ops", ctx, param)
    return value.strip() if value else None


def by_option(who: str) -> Callable[[Command], Command]:
    """``--by NAME``: ``who`` acts (``Who pauses``), for the record."""
    return click.option(
        "--by", callback=check_by, metavar="NAME",
        help=f"{who}, for the record (default: user@host).",
    )  # fmt: skip


def scope_options(command: Command) -> Command:
    """One option per dimension of a scope (``-Q``, ``--tasks``, ``-d``), from the table;
    the command receives each as a keyword argument named for its dimension."""
    for dimension in reversed(DIMENSIONS):
        letter = dimension.singular[0].upper()
        command = click.option(
            *dimension.flags, dimension.name, type=NameList(dimension.singular), default=None,
            metavar=f"{letter}1,{letter}2", help=dimension.help,
        )(command)  # fmt: skip
    return command


def shared_store(app: Celery) -> None:
    """Refuse a store that lives in this process alone (``memory://``): nothing this command
    wrote or read there would reach the workers."""
    try:
        url = config_for(app).store_url
    except ConfigurationError:
        return  # said by the command itself, with the rest of the configuration's errors
    if url.partition("://")[0] == "memory":
        raise click.ClickException(
            f"{setting_name(app, 'pause_store_url')} is memory://: that store lives inside one "
            "process, so this command cannot reach the workers' pause state. Use a store every "
            "process shares (redis://…, db+postgresql+psycopg://…, file:///dir for one host)."
        )


def flag_of(ctx: click.Context, name: str, *, short: bool = False) -> str:
    """The long (or ``short``est) option of parameter ``name`` of the current command."""
    for param in ctx.command.params:
        if param.name == name and isinstance(param, click.Option):
            return (min if short else max)(param.opts, key=len)
    return "--" + name.replace("_", "-")
