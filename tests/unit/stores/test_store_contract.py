"""The store contract is checked at load, and every store reports bad URLs and I/O
failures the same way; no service needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from celery_pause.errors import ConfigurationError, StoreError
from celery_pause.model.report import WorkerReport
from celery_pause.model.state import PauseState
from celery_pause.stores import load_store_class, open_store
from celery_pause.stores.aliases import Alias
from celery_pause.stores.base import Change, R, Snapshot, Store, Updated
from support.settings import SECRET, store_config


class StateOnly(Store):
    """A store written for the state alone: it lacks the records."""

    def now(self) -> float:
        return 0.0

    def read(self) -> Snapshot:
        return Snapshot(PauseState(), 0.0)

    def update(self, change: Change[R]) -> Updated[R]:
        return Updated.of(PauseState(), 0.0, change(PauseState(), 0.0))

    def put_worker(self, report: WorkerReport) -> None:
        pass

    def remove_worker(self, hostname: str) -> None:
        pass

    def worker_reports(self) -> list[WorkerReport]:
        return []


def test_a_store_lacking_a_primitive_fails_at_load() -> None:
    # Given a store class that implements the state but not the records
    # Then it cannot be made, and loading it through an alias names what it lacks
    with pytest.raises(TypeError, match="update_record"):
        StateOnly("state://", "p")  # type: ignore[abstract]
    lacks = "lacks delete_record, read_record, record_keys, update_record"
    with pytest.raises(ConfigurationError, match=lacks):
        load_store_class(Alias(f"{__name__}:StateOnly", "state://"))
    with pytest.raises(ConfigurationError, match="is not a pause store"):
        load_store_class(Alias(f"{__name__}:config", "config://"))


def test_the_contract_is_nine_primitives_and_the_rest_is_built_on_records() -> None:
    assert Store.__abstractmethods__ == {
        "read",
        "update",
        "put_worker",
        "remove_worker",
        "worker_reports",
        "read_record",
        "update_record",
        "delete_record",
        "record_keys",
    }


@pytest.mark.parametrize(
    "url",
    [
        f"redis://:{SECRET}@h:notaport/0",
        f"redis://:pa/{SECRET}@h:notaport/0",
        f"rediss://:{SECRET}@h:99999999/0",
        f"db+postgresql+psycopg://u:{SECRET}@h:99999999/x",
        f"db+postgresql+psycopg://u:{SECRET}@h:notaport/x",
        f"file://u:{SECRET}@",
        f"sentinel://:{SECRET}@h:notaport",
        "sentinel://h:99999999;sentinel://h2:26379",
        f"nosuch://u:{SECRET}@h:notaport",
    ],
    ids=[
        "redis-port",
        "redis-slash",
        "rediss-range",
        "sql-range",
        "sql-port",
        "file-path",
        "sentinel-port",
        "sentinel-range",
        "unknown",
    ],
)
def test_a_bad_url_is_a_configuration_error_without_the_password(url: str) -> None:
    with pytest.raises(ConfigurationError, match=r"^pause_store_url '") as caught:
        open_store(store_config(url))
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        f"redis://:{SECRET}@127.0.0.1:1/0",
        f"sentinel://:{SECRET}@127.0.0.1:1",
    ],
    ids=["redis", "sentinel"],
)
def test_an_unreachable_store_is_a_store_error_naming_it_without_the_password(url: str) -> None:
    store = open_store(store_config(url))
    with pytest.raises(StoreError, match=r"^pause store \S+ failed: ") as caught:
        store.read()
    assert SECRET not in str(caught.value)
    assert "127.0.0.1:1" in str(caught.value)


def test_an_unwritable_file_store_is_a_store_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    store = open_store(store_config(f"file://{blocker}"))
    with pytest.raises(StoreError, match=rf"^pause store file://{blocker} failed: "):
        store.read_log("history")
    with pytest.raises(StoreError, match=rf"^pause store file://{blocker} failed: "):
        store.update(lambda state, now: pytest.fail("never read"))


@pytest.mark.parametrize("url", ["file://relative/dir", "file://host/dir"])
def test_a_file_store_url_that_is_no_absolute_directory_is_refused(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a working directory where a relative store would land
    monkeypatch.chdir(tmp_path)

    # When a file store is opened with a URL that names a host or a relative path
    with pytest.raises(ConfigurationError, match="file:///absolute/path") as caught:
        open_store(store_config(url))

    # Then the error says why, and nothing was written anywhere
    assert "is not an absolute directory on this host" in str(caught.value)
    assert not list(tmp_path.iterdir())
