"""Pause stores, chosen by the scheme of ``pause_store_url``."""

from __future__ import annotations

from celery import Celery
from kombu.utils.url import sanitize_url

from ..errors import ConfigurationError
from ..settings import REDIS_SCHEMES, PauseConfig, config_for
from .base import Snapshot, Store

__all__ = ("Snapshot", "Store", "open_store", "store_for")


def open_store(config: PauseConfig) -> Store:
    """A new store for ``config``; raises :class:`ConfigurationError` for an unknown scheme."""
    scheme = config.store_url.partition("://")[0]
    if scheme in REDIS_SCHEMES:
        from .redis import RedisStore

        return RedisStore(config.store_url, config.key_prefix, timeout=config.store_timeout)
    if scheme == "file":
        from .file import FileStore

        return FileStore(config.store_url, config.key_prefix)
    raise ConfigurationError(
        f"pause_store_url {sanitize_url(config.store_url)!r} has an unknown scheme; "
        "use redis://, rediss://, unix:// or file:///dir"
    )


def store_for(app: Celery) -> Store:
    """The app's store, opened on first use and cached on the app."""
    cached: Store | None = getattr(app, "_celery_pause_store", None)
    if cached is None:
        cached = open_store(config_for(app))
        app._celery_pause_store = cached
    return cached
