"""The shell-safety tests call the stand-ins by name: their executable bits must be set."""

from __future__ import annotations

import pytest

from tests.shell_safety.harness import STANDIN_PROGRAMS
from tests.support.paths import STANDINS


@pytest.fixture(autouse=True, scope="module")
def _standins_are_executable() -> None:
    """A checkout may lose the executable bits; the scripts call the stand-ins by name."""
    for name in STANDIN_PROGRAMS:
        path = STANDINS / name
        path.chmod(path.stat().st_mode | 0o111)
