"""The jobs table as the first release made it (commit f830dee), before cluster jobs' members.

Revision ID: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("resource_id", sa.String(63), nullable=False),
        sa.Column("idempotency_key", sa.String(255)),
        sa.Column("request_hash", sa.String(64)),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("effective_spec", sa.JSON(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("script", sa.Text(), nullable=False),
        sa.Column("native_id", sa.String(64)),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("desired", sa.String(16), nullable=False),
        sa.Column("exit_code", sa.Integer()),
        sa.Column("message", sa.Text()),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.Column("submit_attempted_at", sa.Float()),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("owner", "idempotency_key", name="uq_owner_key"),
    )
    for column in ("owner", "resource_id", "native_id", "state"):
        op.create_index(f"ix_jobs_{column}", "jobs", [column])


def downgrade() -> None:
    op.drop_table("jobs")
