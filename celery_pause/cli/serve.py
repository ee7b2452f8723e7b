"""``celery -A proj pause serve``: the admin API and status page as a command."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import click
from celery import Celery
from celery.bin.base import CeleryCommand

from ..errors import ConfigurationError
from ..http.admin import make_admin_app, read_token
from ..http.server import Server, is_loopback
from .params import shared_store

DEFAULT_PORT = 5580


@click.command("serve", cls=CeleryCommand)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=DEFAULT_PORT,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on (0 picks a free one).",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="CELERY_PAUSE_TOKEN_FILE",
    help="File holding the bearer token clients must send (env CELERY_PAUSE_TOKEN_FILE).",
)
@click.option(
    "--no-auth",
    is_flag=True,
    help="Serve without authentication: allowed on a loopback address only.",
)
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, token_file: Path | None, no_auth: bool) -> None:
    """Serve the admin API and status page: GET /status, POST /pause, POST /resume, GET /."""
    app: Celery = ctx.obj.app
    shared_store(app)
    if token_file is not None and no_auth:
        raise click.UsageError("give --token-file or --no-auth, not both")
    if token_file is None and not no_auth:
        raise click.UsageError(
            "the admin API needs a token: --token-file FILE (clients send "
            "'Authorization: Bearer <token>'), or --no-auth on a loopback address"
        )
    if no_auth and not is_loopback(host):
        raise click.UsageError(f"--no-auth is allowed on a loopback address only, not {host!r}")
    try:
        token = read_token(token_file) if token_file is not None else None
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        server = Server(make_admin_app(app, token=token), host, port, name="celery-pause-admin")
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda signum, frame: stop.set())
    server.start()
    auth = "bearer token required" if token is not None else "NO authentication (loopback only)"
    click.echo(f"celery-pause admin on {server.url}/ ({auth}); Ctrl-C to stop", err=False)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.close()
        click.echo("celery-pause admin stopped")
