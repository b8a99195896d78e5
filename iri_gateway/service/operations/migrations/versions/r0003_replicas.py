"""Several gateway replicas on one store: who is alive (`replicas`), who does what for all
(`leases`), which replica is sending a job (`jobs.claimed_by`), and whether the scheduler
has answered a job's cancel (`jobs.cancel_sent`).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("claimed_by", sa.String(36), nullable=True))
    op.add_column(
        "jobs",
        sa.Column("cancel_sent", sa.Boolean(), nullable=False, server_default=sa.text("false")),
    )
    op.create_index("ix_jobs_claimed_by", "jobs", ["claimed_by"])
    op.create_table(
        "replicas",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("pid_space", sa.String(255), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("heartbeat_at", sa.Float(), nullable=False),
        sa.Column("stopped_at", sa.Float(), nullable=True),
    )
    op.create_index("ix_replicas_heartbeat_at", "replicas", ["heartbeat_at"])
    op.create_table(
        "leases",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("holder", sa.String(36), nullable=False),
        sa.Column("taken_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leases")
    op.drop_index("ix_replicas_heartbeat_at", table_name="replicas")
    op.drop_table("replicas")
    op.drop_index("ix_jobs_claimed_by", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("cancel_sent")
        batch.drop_column("claimed_by")
