"""Where things are, for tests at any depth of the tree.

Test modules sit in folders that mirror the package (`tests/service/jobs/`, ...), so a path
counted in `.parent`s from a test file breaks whenever the file moves; these do not.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
"""The `tests/` folder."""

ROOT = TESTS.parent
"""The repository: `facility_profiles/`, `examples/`, `openapi/`, `docs/`, `scripts/`."""

TEST_PROFILE = TESTS / "profiles" / "testsite.yaml"
"""The test site's profile."""

STANDINS = TESTS / "standins"
"""Every stand-in program and its shared Python (tests/standins/README.md)."""
