"""How an operator's command ends: its exit codes, celery-pause's errors as messages (never a
traceback), and what a wait prints about the workers that confirmed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

import click
from celery import Celery

from .. import api
from ..api.results import PauseResult
from ..errors import AlreadyPaused, ConfigurationError, InvalidInput, InvalidWindow, StoreError
from ..model.formatting import printable
from ..model.scope import NAMES
from ..settings import config_for, setting_name
from .live import confirmed_line, lost_lines
from .params import flag_of, shared_store

EXIT_USAGE = 2
EXIT_UNCONFIRMED = 3
EXIT_LOST = 4
EXIT_INTERRUPTED = 130


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
