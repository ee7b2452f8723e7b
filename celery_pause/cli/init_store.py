"""``celery -A proj pause init-store``: create the store's tables ahead of first use."""

from __future__ import annotations

import click
from celery import Celery
from celery.bin.base import CeleryCommand

from ..errors import ConfigurationError, StoreError
from ..stores import store_for


@click.command("init-store", cls=CeleryCommand)
@click.pass_context
def init_store(ctx: click.Context) -> None:
    """Create the pause store's tables (SQL stores) unless they exist, and check their
    schema version. Stores first used without it create them then; other kinds of
    store need nothing."""
    app: Celery = ctx.obj.app
    try:
        store = store_for(app)
        done = store.init()
    except StoreError as exc:
        raise click.ClickException(
            f"cannot prepare the pause store: {exc}\nNothing changed. Check pause_store_url, "
            "that the database is up and that its user may create tables."
        ) from None
    except ConfigurationError as exc:
        raise click.ClickException(f"celery-pause is not configured: {exc}") from None
    ctx.obj.echo(f"Pause store {store.display_url} (prefix {store.prefix!r}): {done}.")
