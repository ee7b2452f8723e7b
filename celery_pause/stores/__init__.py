"""Pause stores, chosen by the scheme of ``pause_store_url``."""

from __future__ import annotations

import importlib.util

from celery import Celery
from kombu.utils.url import sanitize_url

from ..errors import ConfigurationError
from ..settings import REDIS_SCHEMES, SENTINEL_SCHEME, PauseConfig, config_for
from .base import Snapshot, Store

__all__ = ("Snapshot", "Store", "open_store", "store_for")

SCHEMES = "redis://, rediss://, unix://, sentinel://, db+<SQLAlchemy URL>, file:///dir or memory://"


def open_store(config: PauseConfig) -> Store:
    """A new store for ``config``; raises :class:`ConfigurationError` for an unknown scheme."""
    url = config.store_url
    scheme = url.partition("://")[0]
    if scheme in REDIS_SCHEMES:
        from .redis import RedisStore

        return RedisStore(url, config.key_prefix, timeout=config.store_timeout)
    if scheme == SENTINEL_SCHEME:
        from .sentinel import SentinelStore

        return SentinelStore(
            url, config.key_prefix, options=config.store_options, timeout=config.store_timeout
        )
    if scheme.startswith("db+"):
        if importlib.util.find_spec("sqlalchemy") is None:
            raise ConfigurationError(
                f"pause_store_url {sanitize_url(url)!r} needs SQLAlchemy: "
                "pip install 'celery-pause[sql]'"
            )
        from .sql.store import SqlStore

        return SqlStore(url, config.key_prefix, timeout=config.store_timeout)
    if scheme == "file":
        from .file import FileStore

        return FileStore(url, config.key_prefix)
    if scheme == "memory":
        from .memory import MemoryStore

        return MemoryStore(url, config.key_prefix)
    try:
        shown = sanitize_url(url)
    except ValueError:
        shown = "<unreadable URL>"
    raise ConfigurationError(f"pause_store_url {shown!r} has an unknown scheme; use {SCHEMES}")


def store_for(app: Celery) -> Store:
    """The app's store, opened on first use and cached on the app."""
    cached: Store | None = getattr(app, "_celery_pause_store", None)
    if cached is None:
        cached = open_store(config_for(app))
        app._celery_pause_store = cached
    return cached
