"""The ``celery pause`` and ``celery resume`` commands through click's runner."""

from __future__ import annotations

import json
from typing import Any

import click
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner, Result

from celery_pause import cli

from .harness import Cluster


def invoke(app: Celery, command: click.Command, *args: str) -> Result:
    """Run ``command`` with ``args`` on ``app``, as ``celery -A app`` would."""
    obj = CLIContext(app=app, no_color=True, workdir=None)
    return CliRunner().invoke(command, list(args), obj=obj, catch_exceptions=False)


def pause(cluster: Cluster, *args: str) -> Result:
    """``celery pause ARGS`` on the cluster's app."""
    return invoke(cluster.app, cli.pause, *args)


def resume(cluster: Cluster, *args: str) -> Result:
    """``celery resume ARGS`` on the cluster's app."""
    return invoke(cluster.app, cli.resume, *args)


def status_doc(cluster: Cluster) -> dict[str, Any]:
    """The status document, from ``celery pause status --json``."""
    result = pause(cluster, "status", "--json")
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc
