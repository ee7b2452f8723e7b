"""The supported Celery releases, each tested with the kombu it ships with.

Per Celery minor release, ``nox`` runs the worker-internals checks, one end-to-end pause
(prefetched and ETA tasks held, a restarted worker obeys, every task runs once after the
resume) on Redis and on RabbitMQ, and a task raising ``Overloaded`` published again unchanged
(Celery's ``task_retry`` and ``signature_from_request``). The oldest release runs on the
oldest redis-py supported.
``.ci/run`` runs every session; ``nox -s "compat(celery='5.3')"`` runs one.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True

RELEASES: dict[str, tuple[str, ...]] = {
    "5.3": ("celery[redis]==5.3.6", "kombu==5.3.7", "redis==4.6.0"),
    "5.4": ("celery[redis]==5.4.0", "kombu==5.4.2"),
    "5.5": ("celery[redis]==5.5.3", "kombu==5.5.4"),
    "5.6": ("celery[redis]==5.6.3", "kombu==5.6.2"),
    "5.7": ("celery[redis]==5.7.0", "kombu==5.7.0"),
}
"""Each Celery minor release, with the kombu release it ships with (and redis-py if pinned)."""
TOOLS = (
    "pytest>=8",
    "pytest-timeout>=2.3",
    "psutil>=5.9",
    "hypothesis>=6.100",
    "sqlalchemy>=2",
    "gevent>=24.2",
    "eventlet>=0.36",
)
"""What the checks need besides Celery (the test support imports SQLAlchemy)."""
CHECKS = (
    "tests/unit/worker/test_pool_support.py",
    "tests/integration/worker/test_green_internals.py",
    "tests/integration/worker/test_pause_holds.py",
    "tests/integration/worker/test_adaptive_limits.py",
    "tests/integration/worker/test_parking.py",
    "tests/integration/worker/test_batch_move.py",
    "-k",
    "test_pool_support or test_green_internals or nothing_starts_while_paused"
    " or no_adaptive_limit_covers or (moved_twice and redis) or test_batch_move",
)

VERSIONS = (
    "import celery, kombu, redis; "
    "print('celery', celery.__version__, 'kombu', kombu.__version__, 'redis', redis.__version__)"
)


@nox.session
@nox.parametrize("celery", list(RELEASES))
def compat(session: nox.Session, celery: str) -> None:
    """The worker-internals checks and one end-to-end pause on one Celery release."""
    session.install(*RELEASES[celery], *TOOLS)
    session.install("--no-deps", ".")
    session.run("python", "-c", VERSIONS)
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *CHECKS, *session.posargs)
