"""pytest-celery fixtures for apps that run celery-pause.

Opt in from a ``conftest.py`` (pytest-celery's own plugin must be on too)::

    pytest_plugins = ["celery_pause.contrib.pytest"]

``celery_setup``'s worker containers then run :class:`~celery_pause.PauseStep`, built from an
image with celery-pause installed, with a short poll interval; the test side's
``celery_setup.app`` speaks to the same store, and ``celery_pause_setup`` pauses, resumes and
asserts that a task is held and not started. Override the fixtures below to change the image
(:class:`WorkerImage`), the settings, or the store.
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from importlib.resources import files
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest
from celery import Celery
from celery.result import AsyncResult

import celery_pause

try:
    import docker
    from docker.models.images import Image
    from pytest_celery import CeleryTestSetup, CeleryWorkerContainer
except ImportError as exc:  # pragma: no cover - the hint is the point
    raise ImportError(
        "celery_pause.contrib.pytest needs pytest-celery: pip install 'celery-pause[containers]'"
    ) from exc

__all__ = (
    "PauseSetup",
    "PauseWorkerContainer",
    "StoreUrls",
    "WorkerImage",
    "build_worker_image",
    "default_packages",
    "store_urls",
    "wait_for",
)

T = TypeVar("T")


def _pinned(name: str, requirement: str | None = None) -> str:
    """``requirement==<the version installed here>``, or ``requirement`` if it is not."""
    try:
        return f"{requirement or name}=={version(name)}"
    except PackageNotFoundError:
        return requirement or name


def default_packages() -> tuple[str, ...]:
    """What the worker image installs by default: the test side's Celery, celery-pause and
    pytest-celery (the worker container's app imports pytest-celery's tasks)."""
    return (
        _pinned("celery", "celery[redis]"),
        _pinned("celery-pause"),
        _pinned("pytest-celery"),
    )


@dataclass(frozen=True)
class WorkerImage:
    """How the worker image is built: ``base`` with ``packages`` pip-installed.

    ``packages`` are pip requirements, or paths of wheels and sdists (copied into the build).
    ``pip_options`` go before them (``--no-index``, ``--find-links``); ``network_mode`` is the
    build's network (``"host"`` where a build must use the host's). ``packages=()`` uses
    ``base`` as it is: an image of your own with celery-pause already installed.
    """

    base: str = "python:3.12-slim-bookworm"
    packages: tuple[str, ...] = field(default_factory=default_packages)
    pip_options: tuple[str, ...] = ()
    network_mode: str | None = None
    tag: str = "celery-pause/pytest-worker:latest"


def build_worker_image(client: docker.DockerClient, image: WorkerImage) -> Image:
    """Build ``image`` with the Docker engine of ``client`` and return it."""
    with tempfile.TemporaryDirectory(prefix="celery-pause-worker-") as tmp:
        context = Path(tmp)
        dockerfile = files("celery_pause.contrib").joinpath("Dockerfile")
        (context / "Dockerfile").write_bytes(dockerfile.read_bytes())
        packages = []
        for package in image.packages:
            path = Path(package)
            if path.is_file():
                shutil.copy(path, context / path.name)
                packages.append(f"./{path.name}")
            else:
                packages.append(package)
        options: dict[str, Any] = {}
        if image.network_mode:
            options["network_mode"] = image.network_mode
        built, _ = client.images.build(
            path=str(context),
            tag=image.tag,
            buildargs={
                "BASE_IMAGE": image.base,
                "PACKAGES": " ".join(packages),
                "PIP_OPTIONS": " ".join(image.pip_options),
            },
            rm=True,
            forcerm=True,
            **options,
        )
        return built


class PauseWorkerContainer(CeleryWorkerContainer):
    """pytest-celery's worker container, with an app module that installs ``PauseStep``."""

    @classmethod
    def app_module(cls) -> ModuleType:
        return importlib.import_module("celery_pause.contrib.worker_app")


@dataclass(frozen=True)
class StoreUrls:
    """The pause store as each side reaches it: ``worker`` from the containers' network,
    ``test`` from the test side (published ports). ``None``: the broker, celery-pause's default
    with a Redis broker."""

    worker: str | None = None
    test: str | None = None


def store_urls(cluster_config: dict[str, Any]) -> StoreUrls:
    """The broker if it is Redis, else the first Redis result backend."""
    brokers = cluster_config.get("celery_broker_cluster_config") or {}
    if brokers and brokers["urls"][0].startswith("redis://"):
        return StoreUrls()
    backends = cluster_config.get("celery_backend_cluster_config") or {}
    if backends and backends["urls"][0].startswith("redis://"):
        return StoreUrls(worker=backends["urls"][0], test=backends["host_urls"][0])
    raise pytest.UsageError(
        "celery-pause needs a store: give the setup a Redis broker or a Redis result backend, "
        "or override the celery_pause_store fixture"
    )


def wait_for(
    what: str, probe: Callable[[], T | None], *, timeout: float, interval: float = 0.1
) -> T:
    """Poll ``probe`` until it returns something truthy, and return that; fail after
    ``timeout`` seconds saying ``what`` did not happen."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g}s")
        time.sleep(interval)


class PauseSetup:
    """A pytest-celery setup whose workers run ``PauseStep``, with the calls a test needs.

    :param setup: ``celery_setup``; its ``app`` is the test side's.
    :param timeout: how long the waits below wait, in seconds.
    """

    def __init__(self, setup: CeleryTestSetup, *, timeout: float = 30.0) -> None:
        self.setup = setup
        self.app: Celery = setup.app
        self.timeout = timeout

    def nodenames(self) -> set[str]:
        """The node names (``name@host``) of the setup's worker containers."""
        return {w.hostname() for w in self.setup.worker_cluster or ()}

    def wait_for_workers(self, names: Iterable[str] | None = None) -> None:
        """Wait until every worker in ``names`` (default: the setup's) reports to the store."""
        expected = set(names) if names is not None else self.nodenames()
        wait_for(
            f"reports from {sorted(expected)}",
            lambda: expected <= {r.hostname for r in self.status().workers},
            timeout=self.timeout,
        )

    def wait_applied(self, generation: int, *, since: float | None = None) -> None:
        """Wait until every worker of the setup reports ``generation`` (or later) applied, as
        the state stood at store time ``since`` or later (``status().now``: a worker process
        started after that reads the state anew)."""
        names = self.nodenames()

        def applied() -> bool:
            reports = {r.hostname: r for r in self.status().workers}
            return all(n in reports and reports[n].quiet_for(generation, since) for n in names)

        wait_for(f"{sorted(names)} applying generation {generation}", applied, timeout=self.timeout)

    def pause(self, **kwargs: Any) -> celery_pause.PauseResult:
        """:func:`celery_pause.pause` with ``wait=True``: returns once every worker applied it."""
        self.wait_for_workers()
        kwargs.setdefault("timeout", self.timeout)
        return celery_pause.pause(self.app, wait=True, **kwargs)

    def resume(self, **kwargs: Any) -> celery_pause.ResumeResult:
        """:func:`celery_pause.resume` on the setup's app."""
        return celery_pause.resume(self.app, **kwargs)

    def status(self) -> celery_pause.ClusterStatus:
        """:func:`celery_pause.status` on the setup's app."""
        return celery_pause.status(self.app)

    def received(self, result: AsyncResult) -> set[str]:
        """The worker containers (node names) whose log shows ``result``'s task received."""
        marker = f"[{result.id}] received"
        return {w.hostname() for w in self.setup.worker_cluster or () if marker in w.logs()}

    def held(self) -> dict[str, int]:
        """How many tasks each worker (node name) reports holding."""
        return {r.hostname: r.held for r in self.status().workers}

    def assert_not_started(self, *results: AsyncResult, during: float = 1.0) -> None:
        """Assert that none of ``results``' tasks starts for ``during`` seconds: each stays
        ``PENDING`` (the plugin's settings turn on ``task_track_started``, so a start shows)."""
        deadline = time.monotonic() + during
        while True:
            for result in results:
                state = result.state
                assert state == "PENDING", f"task {result.id} is {state} while paused"
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)

    def assert_held(self, result: AsyncResult, *, during: float = 1.0) -> None:
        """Assert that ``result``'s task reached a worker container, that this worker reports
        holding a task, and that the task does not start for ``during`` seconds."""

        def holders() -> set[str]:
            held = self.held()
            return {name for name in self.received(result) if held.get(name)}

        wait_for(f"task {result.id} received and held by a worker", holders, timeout=self.timeout)
        self.assert_not_started(result, during=during)


@pytest.fixture(scope="session")
def celery_pause_worker_image() -> WorkerImage:
    """How the worker image is built. Override to change the base image or the packages."""
    return WorkerImage()


@pytest.fixture(scope="session")
def celery_base_worker_image(
    docker_client: docker.DockerClient, celery_pause_worker_image: WorkerImage
) -> Image:
    """pytest-celery's worker image, built once per session from ``celery_pause_worker_image``."""
    return build_worker_image(docker_client, celery_pause_worker_image)


@pytest.fixture
def default_worker_container_cls() -> type[CeleryWorkerContainer]:
    """The worker containers run :class:`PauseWorkerContainer`."""
    return PauseWorkerContainer


@pytest.fixture(scope="session")
def default_worker_container_session_cls() -> type[CeleryWorkerContainer]:
    """The worker containers run :class:`PauseWorkerContainer`."""
    return PauseWorkerContainer


@pytest.fixture
def celery_pause_settings() -> dict[str, Any]:
    """Settings given to the workers and the test side: a short poll interval, and
    ``task_track_started`` so that :meth:`PauseSetup.assert_held` sees a start."""
    return {"pause_poll_interval": 0.2, "task_track_started": True}


@pytest.fixture
def celery_pause_store(celery_worker_cluster_config: dict[str, Any]) -> StoreUrls:
    """Where the pause state lives: the Redis broker, else the Redis result backend."""
    return store_urls(celery_worker_cluster_config)


@pytest.fixture
def celery_setup_app(
    celery_setup_cls: type[CeleryTestSetup],
    celery_setup_config: dict[str, Any],
    celery_setup_name: str,
    celery_pause_settings: dict[str, Any],
    celery_pause_store: StoreUrls,
) -> Celery:
    """pytest-celery's setup app with ``celery_pause_settings``; the workers get its settings."""
    app: Celery = celery_setup_cls.create_setup_app(
        celery_setup_config=celery_setup_config, celery_setup_app_name=celery_setup_name
    )
    app.conf.update(celery_pause_settings)
    if celery_pause_store.test:
        app.conf.pause_store_url = celery_pause_store.test
    return app


@pytest.fixture
def default_worker_env(
    default_worker_container_cls: type[CeleryWorkerContainer],
    celery_worker_cluster_config: dict[str, Any],
    celery_pause_store: StoreUrls,
) -> dict[str, str]:
    """pytest-celery's worker environment, with the store as the containers reach it."""
    env: dict[str, str] = default_worker_container_cls.initial_env(celery_worker_cluster_config)
    if celery_pause_store.worker:
        env["CELERY_PAUSE_STORE_URL"] = celery_pause_store.worker
    return env


@pytest.fixture
def celery_pause_setup(celery_setup: CeleryTestSetup) -> PauseSetup:
    """``celery_setup`` with pause, resume, status and held-task assertions."""
    return PauseSetup(celery_setup)
