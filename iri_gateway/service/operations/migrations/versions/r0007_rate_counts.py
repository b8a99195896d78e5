"""The per-user request counts the replicas share for the rate limits (`rate_counts`:
replica, user, kind of request, window `slot`, count).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rate_counts",
        sa.Column("replica_id", sa.String(36), primary_key=True),
        sa.Column("owner", sa.String(255), primary_key=True),
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("slot", sa.Integer(), primary_key=True),
        sa.Column("count", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("rate_counts")
