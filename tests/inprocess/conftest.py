"""The in-process tier's fixture: a fresh app per test, on the memory broker and store; each
test starts its own worker (``proj.worker()``) in this process."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from support.inprocess import Proj


@pytest.fixture
def proj(request: pytest.FixtureRequest) -> Iterator[Proj]:
    """A private app named for the test; its store emptied afterwards."""
    made = Proj(re.sub(r"[^A-Za-z0-9_]+", "-", request.node.name)[:48])
    yield made
    made.close()
