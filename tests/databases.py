"""The databases the store's tests run on: SQLite in a test's folder, and a real PostgreSQL
that `scripts/postgres start` runs (loopback, port 55432), a fresh database for each test.

`IRI_TEST_POSTGRES_URL` names another server instead (a role that may create databases).
A PostgreSQL that cannot be started or reached FAILS the tests that need it, with the
reason: they are never skipped.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from iri_gateway.service.operations.database import normalise_url

POSTGRES_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "postgres"


def _run_script(command: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [str(POSTGRES_SCRIPT), command], capture_output=True, text=True, timeout=600
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(
            f"scripts/postgres {command} did not finish within 600 s\n"
            f"{error.stdout!r}\n{error.stderr!r}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The URL of a database on the test PostgreSQL whose role may create databases."""
    given = os.environ.get("IRI_TEST_POSTGRES_URL")
    if given:
        return normalise_url(given)
    started = _run_script("start")
    if started.returncode != 0:
        pytest.fail(
            f"scripts/postgres start failed (exit {started.returncode}): the store's "
            f"PostgreSQL tests need a real server.\n--- stdout\n{started.stdout}\n"
            f"--- stderr\n{started.stderr}",
            pytrace=False,
        )
    env = _run_script("env")
    prefix = "export IRI_TEST_POSTGRES_URL="
    if env.returncode != 0 or not env.stdout.startswith(prefix):
        pytest.fail(f"scripts/postgres env failed:\n{env.stdout}{env.stderr}", pytrace=False)
    return normalise_url(env.stdout[len(prefix) :].strip())


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database on the test server, dropped after the test."""
    name = f"iri_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as error:
        admin.dispose()
        pytest.fail(f"cannot make a test database on {postgres_server}: {error}", pytrace=False)
    url = make_url(postgres_server).set(database=name)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each store test runs on SQLite (a file in its folder) and on a fresh PostgreSQL
    database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/jobs.db"
    url: str = request.getfixturevalue("postgres_url")
    return url
