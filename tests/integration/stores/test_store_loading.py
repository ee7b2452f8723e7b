"""Every alias loads a whole store, and an unreachable SQL store fails as every store does
(the SQL store needs SQLAlchemy, the ``sql`` extra: not in the quick loop)."""

from __future__ import annotations

import pytest

from celery_pause.errors import StoreError
from celery_pause.stores import load_store_class, open_store
from celery_pause.stores.aliases import BROKER_SCHEMES, SCHEMES, STORE_ALIASES, alias_for
from support.settings import SECRET, store_config


def test_every_alias_loads_a_whole_store() -> None:
    for alias in STORE_ALIASES.values():
        assert not load_store_class(alias).__abstractmethods__
    assert BROKER_SCHEMES == ("redis", "rediss", "unix", "sentinel")
    assert alias_for("db+postgresql+psycopg://h/x") is STORE_ALIASES["db+"]
    assert alias_for("dbx+postgresql://h/x") is None
    assert SCHEMES.endswith("file:///dir or memory://")


def test_an_unreachable_sql_store_is_a_store_error_naming_it_without_the_password() -> None:
    store = open_store(store_config(f"db+postgresql+psycopg://u:{SECRET}@127.0.0.1:1/x"))
    with pytest.raises(StoreError, match=r"^pause store \S+ failed: ") as caught:
        store.read()
    assert SECRET not in str(caught.value)
    assert "127.0.0.1:1" in str(caught.value)
