"""What every tier shares; the fixtures of the behaviour tests (real brokers, stores and
workers) are in ``tests/integration/conftest.py``, so that ``pytest tests/unit`` imports
nothing but the package, pytest and Hypothesis."""

from __future__ import annotations

import signal

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C as a terminal sends it: a run started in the background of a shell (bash's
    ``&``) inherits SIGINT ignored and would pass that on to every process the tests start,
    which the Ctrl-C tests then could not stop. A handler (not ``SIG_IGN``) is reset to the
    default in each process started."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
