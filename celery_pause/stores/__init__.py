"""Pause stores, chosen by the scheme of ``pause_store_url`` (see :mod:`.aliases`)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect

from celery import Celery

from ..errors import ConfigurationError
from ..settings import PauseConfig, config_for
from .aliases import SCHEMES, STORE_ALIASES, Alias, alias_for
from .base import RecordUpdated, Snapshot, Store, Updated, bad_url, display

__all__ = (
    "STORE_ALIASES",
    "RecordUpdated",
    "Snapshot",
    "Store",
    "Updated",
    "load_store_class",
    "open_store",
    "store_for",
)


def open_store(config: PauseConfig) -> Store:
    """A new store for ``config``; raises :class:`ConfigurationError` for an unknown scheme,
    a URL the store cannot use, or a store class that breaks the contract."""
    url, setting = config.store_url, config.store_setting
    alias = alias_for(url)
    if config.store_from_broker and (alias is None or not alias.broker):
        scheme = url.partition("://")[0]
        raise ConfigurationError(
            f"celery-pause needs a store: set {setting} (redis://…, db+postgresql+psycopg://…, "
            "file:///dir, …); only a Redis (or Sentinel) broker doubles as the store, and this "
            f"broker is {scheme or 'unset'!r}"
        )
    if alias is None:
        raise ConfigurationError(f"{setting} {display(url)!r} has an unknown scheme; use {SCHEMES}")
    try:
        if alias.requires and importlib.util.find_spec(alias.requires) is None:
            raise bad_url(url, f"needs {alias.install}")
        store_class = load_store_class(alias)
        return store_class.open(
            url, config.key_prefix, timeout=config.store_timeout, options=config.store_options
        )
    except ConfigurationError as exc:
        # Stores name the setting as Celery does; say it as the app's configuration does.
        raise ConfigurationError(str(exc).replace("pause_store_url", setting, 1)) from None


def load_store_class(alias: Alias) -> type[Store]:
    """The store class ``alias`` names; :class:`ConfigurationError` unless it is a
    :class:`Store` with every method of the contract."""
    module_name, _, class_name = alias.target.partition(":")
    found = getattr(importlib.import_module(module_name), class_name, None)
    if not (isinstance(found, type) and issubclass(found, Store)):
        raise ConfigurationError(f"{alias.target} is not a pause store")
    if inspect.isabstract(found):
        missing = ", ".join(sorted(found.__abstractmethods__))
        raise ConfigurationError(f"the pause store {alias.target} lacks {missing}")
    return found


def store_for(app: Celery) -> Store:
    """The app's store, opened on first use and cached on the app."""
    cached: Store | None = getattr(app, "_celery_pause_store", None)
    if cached is None:
        cached = open_store(config_for(app))
        app._celery_pause_store = cached
    return cached
