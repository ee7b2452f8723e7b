"""Pause settings for a store URL alone, as the store tests open stores without an app."""

from __future__ import annotations

from celery_pause.settings import PauseConfig

SECRET = "s3cret-pw"
"""A password the store tests put in URLs and look for in every message."""


def store_config(url: str) -> PauseConfig:
    """The settings of an app whose store is at ``url`` (short timeouts, a Sentinel master)."""
    return PauseConfig(
        store_url=url,
        key_prefix="p",
        poll_interval=1,
        max_hold=60,
        worker_ttl=10,
        store_timeout=0.5,
        store_options={"master_name": "m", "wait_replicas": 0},
    )
