"""The audit log (`audit`): one row per state-changing call, append-only by the database's
own rule, not only by the gateway's code.

Triggers refuse every UPDATE, and a DELETE of any row younger than `AUDIT_FLOOR_DAYS` (the
smallest retention the setting allows), so the retention sweep (which deletes only rows
older than the retention) is the one delete that passes, and nobody can erase the last day's
records of what they just did through the gateway's database role. On PostgreSQL TRUNCATE is
refused too. Someone who may drop triggers (the table's owner, a superuser) can still change
the table: the triggers guard against the gateway's own mistakes and a stolen gateway
session, not against the database's administrator (docs/operations.md, "Audit log").

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision: str | None = "0008"
branch_labels = None
depends_on = None

AUDIT_FLOOR_DAYS = 1
"""Rows younger than this many days can never be deleted (the retention's lower bound)."""
APPEND_ONLY = "the audit log is append-only: its rows are never changed"
TOO_YOUNG = f"the audit log keeps every row for at least {AUDIT_FLOOR_DAYS} day(s)"
_FLOOR_SECONDS = AUDIT_FLOOR_DAYS * 86400

_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"

_POSTGRES_FUNCTIONS = f"""
CREATE FUNCTION audit_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '{APPEND_ONLY}' USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE FUNCTION audit_refuse_young_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.at > extract(epoch FROM clock_timestamp()) - {_FLOOR_SECONDS} THEN
        RAISE EXCEPTION '{TOO_YOUNG}' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END;
$$;
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_old_delete_only BEFORE DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_young_delete();
"""

_SQLITE_TRIGGERS = (
    f"""CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY}'); END""",
    f"""CREATE TRIGGER audit_old_delete_only BEFORE DELETE ON audit
    WHEN OLD.at > {_SQLITE_NOW} - {_FLOOR_SECONDS}
    BEGIN SELECT RAISE(ABORT, '{TOO_YOUNG}'); END""",
)


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("user", sa.String(255), nullable=False),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("operation", sa.String(64), nullable=False),
        sa.Column("resource_id", sa.String(63), nullable=True),
        sa.Column("target", sa.Text(), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(255), nullable=True),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.Column("trace_id", sa.String(32), nullable=True),
    )
    op.create_index("ix_audit_at", "audit", ["at", "id"])
    op.create_index("ix_audit_user_at", "audit", ["user", "at", "id"])
    op.create_index("ix_audit_operation_at", "audit", ["operation", "at", "id"])
    if op.get_context().dialect.name == "postgresql":
        op.execute(_POSTGRES_FUNCTIONS)
    else:
        for trigger in _SQLITE_TRIGGERS:
            op.execute(trigger)


def downgrade() -> None:
    op.drop_table("audit")  # its triggers go with it
    if op.get_context().dialect.name == "postgresql":
        op.execute(
            "DROP FUNCTION audit_refuse_change(); DROP FUNCTION audit_refuse_young_delete();"
        )
