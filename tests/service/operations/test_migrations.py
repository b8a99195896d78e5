"""The store's schema migrations, on SQLite and on a real PostgreSQL: a database of the first
release's schema (made before the migrations existed) is upgraded in place and keeps its
jobs; a fresh database gets exactly the schema the store's model describes; databases the
gateway cannot run on are refused in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Engine

from iri_gateway.models.job import JobState
from iri_gateway.service.operations import schema as schema_module
from iri_gateway.service.operations.database import DatabaseError, normalise_url
from iri_gateway.service.operations.migrations import head_revision
from iri_gateway.service.operations.settings import Settings
from iri_gateway.service.operations.store import JobStore
from tests.conftest import recorded_job
from tests.support.serve import clean_env

# The jobs table exactly as the release before cluster jobs created it (`.schema` of a
# SQLite database made by store.py of commit 5901d31; the same DDL is what SQLAlchemy's
# create_all emitted on PostgreSQL), with one finished job in it. The statements run one
# by one on both databases.
OLD_SCHEMA = [
    """CREATE TABLE jobs (
	id VARCHAR(36) NOT NULL,
	owner VARCHAR(255) NOT NULL,
	resource_id VARCHAR(63) NOT NULL,
	idempotency_key VARCHAR(255),
	request_hash VARCHAR(64),
	spec JSON NOT NULL,
	effective_spec JSON NOT NULL,
	"plan" JSON NOT NULL,
	script TEXT NOT NULL,
	native_id VARCHAR(64),
	state VARCHAR(16) NOT NULL,
	desired VARCHAR(16) NOT NULL,
	exit_code INTEGER,
	message TEXT,
	history JSON NOT NULL,
	submit_attempted_at FLOAT,
	created_at FLOAT NOT NULL,
	updated_at FLOAT NOT NULL,
	PRIMARY KEY (id),
	CONSTRAINT uq_owner_key UNIQUE (owner, idempotency_key)
)""",
    "CREATE INDEX ix_jobs_native_id ON jobs (native_id)",
    "CREATE INDEX ix_jobs_owner ON jobs (owner)",
    "CREATE INDEX ix_jobs_state ON jobs (state)",
    "CREATE INDEX ix_jobs_resource_id ON jobs (resource_id)",
    """INSERT INTO jobs VALUES ('old-job', 'alice', 'local', 'key-1', NULL, '{}', '{}', '{}',
    'true', '42', 'completed', 'submitted', 0, 'EXITED, exit code 0',
    '[{"state": "new", "time": 1.0, "message": "accepted by the gateway"}]', NULL, 1.0, 2.0)""",
    """INSERT INTO jobs VALUES ('old-running', 'bob', 'local', NULL, NULL, '{}', '{}', '{}',
    'sleep 100', '43', 'active', 'submitted', NULL, 'RUNNING', '[]', 1.5, 1.5, 3.0)""",
]


def plain_engine(url: str) -> Engine:
    """An engine of our own, to look at the database the way an operator would."""
    return create_engine(normalise_url(url))


def run(url: str, statements: list[str]) -> None:
    engine = plain_engine(url)
    with engine.begin() as connection:
        for statement in statements:
            connection.exec_driver_sql(statement)
    engine.dispose()


def revision_of(url: str) -> str | None:
    engine = plain_engine(url)
    with engine.connect() as connection:
        revision = MigrationContext.configure(connection).get_current_revision()
    engine.dispose()
    return revision


def columns_of(url: str) -> list[str]:
    engine = plain_engine(url)
    names = [column["name"] for column in inspect(engine).get_columns("jobs")]
    engine.dispose()
    return names


def test_a_first_release_database_is_upgraded_and_keeps_its_jobs(database_url: str) -> None:
    run(database_url, OLD_SCHEMA)
    assert revision_of(database_url) is None
    store = JobStore(database_url)
    assert revision_of(database_url) == head_revision() == "0015"
    assert columns_of(database_url).count("members") == 1
    old = store.get("old-job")
    assert old is not None and old.state == JobState.COMPLETED and old.exit_code == 0
    assert old.members == [], "earlier jobs read as having no members, not NULL"
    assert old.history == [{"state": "new", "time": 1.0, "message": "accepted by the gateway"}]
    assert (old.claimed_by, old.cancel_sent) == (None, False), "nobody sends it; no cancel"
    assert old.account is None, "its account is found by its owner's name, as before"
    assert [r.id for r in store.unsettled()] == ["old-running"]
    found = store.by_idempotency_key("alice", "key-1")
    assert found is not None and found.id == "old-job", "the unique key constraint survives"
    new = recorded_job(store)
    reopened = JobStore(database_url)  # a second start finds the head and changes nothing
    assert revision_of(database_url) == head_revision()
    assert {r.id for r in reopened.find()} == {"old-job", "old-running", new.id}


def test_a_database_of_the_members_release_is_taken_as_revision_0002(database_url: str) -> None:
    """The last schema before the migrations (made by create_all, members added) has no
    alembic_version: it is recorded as 0002 (members are not added twice) and upgraded."""
    run(database_url, OLD_SCHEMA)
    run(database_url, ["ALTER TABLE jobs ADD COLUMN members JSON NOT NULL DEFAULT '[]'"])
    store = JobStore(database_url)
    assert revision_of(database_url) == head_revision()
    assert columns_of(database_url).count("members") == 1
    assert len(store.find()) == 2


def test_a_revision_0002_database_gains_the_replica_tables_and_keeps_its_jobs(
    database_url: str,
) -> None:
    """A store of the one-replica release (revision 0002) upgrades to 0003: its jobs are
    kept, claimed by nobody, no cancel answered; the replica and lease tables exist."""
    from alembic import command

    from iri_gateway.service.operations.migrations import alembic_config

    engine = plain_engine(database_url)
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0002")
    engine.dispose()
    run(
        database_url,
        [
            "INSERT INTO jobs (id, owner, resource_id, spec, effective_spec, plan, script, state, "
            "desired, history, members, created_at, updated_at) VALUES ('kept', 'alice', 'local', "
            "'{}', '{}', '{}', 'true', 'queued', 'canceled', '[]', '[]', 1.0, 1.0)"
        ],
    )
    assert revision_of(database_url) == "0002"
    store = JobStore(database_url)
    assert revision_of(database_url) == head_revision()
    kept = store.get("kept")
    assert kept is not None and kept.state == JobState.QUEUED and kept.desired == "canceled"
    assert (kept.claimed_by, kept.cancel_sent) == (None, False)
    tables = set(inspect(plain_engine(database_url)).get_table_names())
    assert {"replicas", "leases"} <= tables


def test_a_fresh_database_gets_exactly_the_models_schema(database_url: str) -> None:
    JobStore(database_url)
    engine = plain_engine(database_url)
    with engine.connect() as connection:
        # Server defaults are compared by hand below: PostgreSQL has no `=` for JSON, which
        # Alembic's comparison of defaults needs.
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        differences = compare_metadata(context, schema_module.Base.metadata)
    defaults = {column["name"]: column["default"] for column in inspect(engine).get_columns("jobs")}
    engine.dispose()
    assert differences == []
    assert defaults.pop("members").startswith("'[]'")  # PostgreSQL: '[]'::json
    assert defaults.pop("elements").startswith("'[]'")  # an array's, issue 30
    assert defaults.pop("cancel_sent") == "false"
    assert set(defaults.values()) == {None}
    assert revision_of(database_url) == head_revision()


def test_a_jobs_table_that_is_not_the_gateways_is_refused(database_url: str) -> None:
    run(database_url, ["CREATE TABLE jobs (id VARCHAR(36) PRIMARY KEY, title TEXT)"])
    with pytest.raises(DatabaseError) as caught:
        JobStore(database_url)
    message = str(caught.value)
    assert "lacks the columns" in message and "owner" in message and "\n" not in message
    assert revision_of(database_url) is None, "nothing was recorded or changed"
    assert columns_of(database_url) == ["id", "title"]


def test_a_database_from_a_newer_gateway_is_refused(database_url: str) -> None:
    JobStore(database_url)
    run(database_url, ["UPDATE alembic_version SET version_num = '0099'"])
    with pytest.raises(DatabaseError) as caught:
        JobStore(database_url)
    message = str(caught.value)
    assert "0099" in message and "newer gateway" in message and "\n" not in message


def test_an_unreachable_postgresql_is_one_line_without_the_password() -> None:
    with pytest.raises(DatabaseError) as caught:
        # Port 9 (discard) on loopback: nothing listens there, the connection is refused.
        JobStore("postgresql://gateway:s3cret-pw@127.0.0.1:9/jobs")
    message = str(caught.value)
    assert "s3cret-pw" not in message and "\n" not in message
    assert message.startswith(
        "cannot use database postgresql+psycopg://gateway:***@127.0.0.1:9/jobs:"
    )
    assert "refused" in message


def test_a_wrong_password_is_named_without_the_password(postgres_server: str) -> None:
    from sqlalchemy.engine import make_url

    url = make_url(postgres_server).set(password="wrong-pw").render_as_string(False)
    with pytest.raises(DatabaseError) as caught:
        JobStore(url)
    message = str(caught.value)
    assert "wrong-pw" not in message and "***" in message and "\n" not in message
    assert "password authentication failed" in message


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("postgresql://u:p@h/db", "postgresql+psycopg://u:p@h/db"),
        ("postgres://u@h:5433/db", "postgresql+psycopg://u@h:5433/db"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
        ("sqlite:////var/lib/jobs.db", "sqlite:////var/lib/jobs.db"),
    ],
)
def test_postgresql_urls_name_psycopg_3(given: str, used: str) -> None:
    assert normalise_url(given) == used


def test_a_bad_url_or_missing_driver_is_a_database_error() -> None:
    with pytest.raises(DatabaseError) as caught:
        JobStore("mysql://u:pw@127.0.0.1/db")
    assert str(caught.value).startswith(
        "cannot use database mysql://u:***@127.0.0.1/db: no driver for it is installed"
    )
    with pytest.raises(DatabaseError) as caught:
        JobStore("not a url")
    assert "unparseable" in str(caught.value)


def test_the_sqlite_default_stays_zero_configuration(tmp_path: Path) -> None:
    store = JobStore(f"sqlite:///{tmp_path}/jobs.db")
    with store.engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"


def test_serve_with_an_unreachable_database_says_so_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "iri_gateway",
            "serve",
            "--data-dir",
            str(tmp_path),
            "--database-url",
            "postgresql://gateway:s3cret-pw@127.0.0.1:9/jobs",
            "--port",
            "9",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("cannot use database postgresql+psycopg://gateway:***@127.0.0.1")
    assert "s3cret-pw" not in result.stderr + result.stdout


def test_the_database_url_setting_names_psycopg_3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRI_GATEWAY_DATABASE_URL", "postgresql://u:p@db.example/jobs")
    assert Settings().store_url == "postgresql+psycopg://u:p@db.example/jobs"
    monkeypatch.delenv("IRI_GATEWAY_DATABASE_URL")
    assert Settings(data_dir=Path("/srv/gw")).store_url == "sqlite:////srv/gw/jobs.db"


def test_a_revision_0003_database_gains_the_templates_table_and_keeps_its_jobs(
    database_url: str,
) -> None:
    """A store of the release before job templates (revision 0003) upgrades to 0004: its
    jobs are kept, the `templates` table exists, empty, and a template can be kept in it."""
    from iri_gateway.models.job_templates import TaskTemplate
    from iri_gateway.service.jobs.job_templates import TemplateStore

    at_revision_with_a_kept_job(database_url, "0003")
    assert "templates" not in set(inspect(plain_engine(database_url)).get_table_names())
    store = JobStore(database_url)
    assert revision_of(database_url) == head_revision()
    kept = store.get("kept")
    assert kept is not None and kept.state == JobState.QUEUED
    templates = TemplateStore(store)
    assert templates.names("alice") == []
    templates.put("alice", "base", TaskTemplate(kind="task", image="docker.io/library/bash"))
    assert templates.names("alice") == ["base"]


def test_a_revision_0004_database_gains_the_update_keys_and_keeps_its_jobs(
    database_url: str,
) -> None:
    """A store of the release before keyed updates (revision 0004) upgrades to 0005: its
    jobs are kept, and an update's `Idempotency-Key` is recorded once per user."""
    at_revision_with_a_kept_job(database_url, "0004")
    assert "update_keys" not in set(inspect(plain_engine(database_url)).get_table_names())
    store = JobStore(database_url)
    assert revision_of(database_url) == head_revision()
    assert store.get("kept") is not None
    assert store.update_key("alice", "k") is None
    assert store.claim_update_key("alice", "k", "kept", "first") is None
    assert store.claim_update_key("alice", "k", "kept", "second") == "first"
    assert store.claim_update_key("bob", "k", "kept", "theirs") is None
    assert store.update_key("alice", "k") == "first"


def test_a_revision_0005_database_gains_the_tasks_table_and_keeps_its_jobs(
    database_url: str,
) -> None:
    """A store of the release before tasks in the store (revision 0005) upgrades to 0006:
    its jobs are kept, and a task is kept per user."""
    from iri_gateway.service.tasks.records import TaskStore

    at_revision_with_a_kept_job(database_url, "0005")
    assert "tasks" not in set(inspect(plain_engine(database_url)).get_table_names())
    store = JobStore(database_url)
    assert revision_of(database_url) == head_revision()
    assert store.get("kept") is not None
    tasks = TaskStore(store)
    made = tasks.create(
        "alice", {"router": "filesystem", "command": "cp", "args": {}}, replica_id="r1"
    )
    assert tasks.get("alice", made.id) is not None
    assert tasks.get("bob", made.id) is None


def test_a_revision_0006_database_gains_the_rate_counts_and_keeps_its_jobs(
    database_url: str,
) -> None:
    """A store of the release before shared rate limits (revision 0006) upgrades (through
    0007) to the head: its jobs are kept, and two limiters on it share their counts."""
    from iri_gateway.service.accounts.rate_limits import RateLimiter, RateLimitError

    at_revision_with_a_kept_job(database_url, "0006")
    assert "rate_counts" not in set(inspect(plain_engine(database_url)).get_table_names())
    store = JobStore(database_url)
    assert revision_of(database_url) == head_revision()
    assert store.get("kept") is not None
    one, other = (
        RateLimiter(store, replica, read_rate=0.3, write_rate=1, window=10, sync_interval=1)
        for replica in ("r1", "r2")
    )
    for _ in range(3):
        one.charge("alice", "read")
    one.sync()
    other.sync()
    with pytest.raises(RateLimitError, match="alice made 3 read requests"):
        other.charge("alice", "read")
    other.charge("bob", "read")


def test_a_revision_0007_database_gains_the_index_of_job_pages(database_url: str) -> None:
    """A store of the release before issue 25 (revision 0007) gains `ix_jobs_pages` (owner,
    resource, created_at, id) and `ix_jobs_owner_pages` (owner, created_at, id) and keeps its
    jobs; the database uses them for a page of one resource and for the newest first."""
    at_revision_with_a_kept_job(database_url, "0007")
    before = {index["name"] for index in inspect(plain_engine(database_url)).get_indexes("jobs")}
    assert "ix_jobs_pages" not in before
    store = JobStore(database_url)
    assert revision_of(database_url) == head_revision()
    indexes = {
        index["name"]: index["column_names"]
        for index in inspect(plain_engine(database_url)).get_indexes("jobs")
    }
    assert indexes["ix_jobs_pages"] == ["owner", "resource_id", "created_at", "id"]
    assert indexes["ix_jobs_owner_pages"] == ["owner", "created_at", "id"]
    kept = store.get("kept")
    assert kept is not None
    assert [r.id for r in store.find(owner=kept.owner, resource_id=kept.resource_id)] == ["kept"]
    if database_url.startswith("sqlite"):
        with plain_engine(database_url).connect() as connection:
            plan = " ".join(
                str(row[-1])
                for row in connection.exec_driver_sql(
                    "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE owner = 'a' AND "
                    "resource_id = 'r' ORDER BY created_at, id LIMIT 100 OFFSET 5000"
                )
            )
            newest = " ".join(
                str(row[-1])
                for row in connection.exec_driver_sql(
                    "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE owner = 'a' "
                    "ORDER BY created_at DESC, id DESC LIMIT 50 OFFSET 5000"
                )
            )
        assert "ix_jobs_pages" in plan and "TEMP B-TREE" not in plan, plan
        assert "ix_jobs_owner_pages" in newest and "TEMP B-TREE" not in newest, newest


def at_revision_with_a_kept_job(url: str, revision: str) -> None:
    """The database at `url` migrated to `revision` only, holding one queued job, `kept`."""
    from alembic import command

    from iri_gateway.service.operations.migrations import alembic_config

    engine = plain_engine(url)
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    engine.dispose()
    run(
        url,
        [
            "INSERT INTO jobs (id, owner, resource_id, spec, effective_spec, plan, script, state, "
            "desired, history, members, created_at, updated_at, cancel_sent) VALUES ('kept', "
            "'alice', 'local', '{}', '{}', '{}', 'true', 'queued', 'submitted', '[]', '[]', 1.0, "
            "1.0, false)"
        ],
    )
