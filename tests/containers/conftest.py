"""The container tier: brokers, a result backend and workers in containers of a private Docker
engine, through pytest-celery's ``celery_setup`` and ``celery_pause.contrib.pytest``.

It runs apart from the main suite, with pytest-celery's plugin on, on the images ``.ci/containers``
builds (which also starts the engine)::

    PYTEST_PLUGINS=celery_pause.contrib.pytest pytest -o addopts="" tests/containers
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_docker_tools.wrappers.container as docker_tools_container
from pytest_celery import (
    DEFAULT_WORKER_VOLUME,
    CeleryTestSetup,
    CeleryTestWorker,
    CeleryWorkerCluster,
)
from pytest_docker_tools import container, fxtr

from celery_pause.contrib.pytest import PauseWorkerContainer, WorkerImage

from . import guard, tasks

# These machines carry /.dockerenv, so pytest-docker-tools would take the tests to run inside a
# container and hand the test side container ports (6379, 5672), which on the host are the
# shared servers. The tier runs on the host: it uses the published ports.
docker_tools_container.tests_inside_container = lambda: False
guard.install()

ROOT = Path(__file__).resolve().parents[2]
IMAGE_PREFIX = "celery-pause-ci"
REDIS_IMAGE = f"{IMAGE_PREFIX}/redis:bookworm"
RABBITMQ_IMAGE = f"{IMAGE_PREFIX}/rabbitmq:bookworm"
WORKER_BASE_IMAGE = f"{IMAGE_PREFIX}/worker-base:bookworm"


def pytest_configure(config: pytest.Config) -> None:
    for plugin in ("celery", "celery_pause.contrib.pytest"):
        if not config.pluginmanager.has_plugin(plugin):
            raise pytest.UsageError(
                f"the container tier needs the {plugin} plugin: run it with "
                "PYTEST_PLUGINS=celery_pause.contrib.pytest pytest -o addopts= tests/containers "
                "(bash .ci/containers starts the engine and builds the images first)"
            )


def pytest_sessionfinish(session: pytest.Session) -> None:
    if guard.attempts:
        print(f"\nshared servers reached by the tier: {guard.attempts}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def celery_pause_worker_image(tmp_path_factory: pytest.TempPathFactory) -> WorkerImage:
    """The checkout as a wheel, on the cached worker base, installed without any network."""
    wheels = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
        check=True,
    )
    (wheel,) = wheels.glob("celery_pause-*.whl")
    return WorkerImage(
        base=WORKER_BASE_IMAGE,
        packages=(str(wheel),),
        pip_options=("--no-index",),
        network_mode="none",
        tag=f"{IMAGE_PREFIX}/worker:checkout",
    )


@pytest.fixture
def default_redis_broker_image() -> str:
    return REDIS_IMAGE


@pytest.fixture
def default_redis_backend_image() -> str:
    return REDIS_IMAGE


@pytest.fixture
def default_rabbitmq_broker_image() -> str:
    return RABBITMQ_IMAGE


@pytest.fixture
def default_worker_tasks() -> set[ModuleType]:
    return {*PauseWorkerContainer.tasks_modules(), tasks}


@pytest.fixture
def celery_pause_settings() -> dict[str, Any]:
    # On Redis a killed worker's unacknowledged messages come back once the visibility timeout
    # has passed, at kombu's next scan (every second here, not every 100 s); RabbitMQ returns
    # them when the connection drops. celery-pause returns a held message after a quarter of
    # the visibility timeout, so none is held long enough to be delivered twice.
    return {
        "pause_poll_interval": 0.2,
        "pause_worker_ttl": 3.0,
        "task_track_started": True,
        "broker_transport_options": {
            "visibility_timeout": 8,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        },
    }


@pytest.fixture(autouse=True)
def shared_servers_untouched(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if it reached a shared server, or if a container's port could be one, and
    check that every worker container connected to the test's own broker container."""
    before = len(guard.attempts)
    setup: CeleryTestSetup | None = None
    if "celery_setup" in request.fixturenames:
        config = request.getfixturevalue("celery_worker_cluster_config")
        for kind in ("broker", "backend"):
            for url in (config.get(f"celery_{kind}_cluster_config") or {}).get("host_urls", []):
                guard.check_port(f"the {kind} container ({url})", urlsplit(url).port or 0)
        setup = request.getfixturevalue("celery_setup")
    yield
    assert guard.attempts[before:] == [], "the test reached the machine's shared servers"
    if setup is not None and setup.broker is not None:
        broker_host = setup.broker.hostname()
        for worker in setup.worker_cluster or ():
            connected = [line for line in worker.logs().splitlines() if "Connected to " in line]
            assert connected, f"{worker.hostname()} never connected to a broker"
            assert all(broker_host in line for line in connected), connected


second_worker_container = container(
    image="{celery_base_worker_image.id}",
    ports=fxtr("default_worker_ports"),
    environment=fxtr("default_worker_env"),
    network="{default_pytest_celery_network.name}",
    volumes={"{default_worker_volume.name}": DEFAULT_WORKER_VOLUME},
    wrapper_class=PauseWorkerContainer,
    timeout=60,
    command=fxtr("default_worker_command"),
)


@pytest.fixture
def second_worker(second_worker_container: Any, default_worker_app: Any) -> Iterator[Any]:
    """A second worker container beside ``celery_worker``, same image, app and broker."""
    worker = CeleryTestWorker(container=second_worker_container, app=default_worker_app)
    yield worker
    worker.teardown()


@pytest.fixture
def two_workers(celery_worker: Any, second_worker: Any) -> Iterator[Any]:
    """A cluster of two worker containers; a test module uses it as ``celery_worker_cluster``."""
    cluster = CeleryWorkerCluster(celery_worker, second_worker)
    yield cluster
    cluster.teardown()
