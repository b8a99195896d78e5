"""The event log (`events`): one row per state change of a job, of a cluster job's member
and of a file task, written in the transaction that makes the change (issue 28).

Ids only grow (SQLite's AUTOINCREMENT: an id is never handed out again, even after the
retention sweep emptied the table), so a stream's `Last-Event-ID` always means the same
place in the log.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision: str | None = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("resource_id", sa.String(63), nullable=True),
        sa.Column("job_id", sa.String(36), nullable=True),
        sa.Column("member", sa.String(255), nullable=True),
        sa.Column("task_id", sa.String(36), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("previous", sa.String(16), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_events_owner_id", "events", ["owner", "id"])
    op.create_index("ix_events_at", "events", ["at"])


def downgrade() -> None:
    op.drop_table("events")
