"""Job templates users keep (`templates`: owner, name, body), from the Backend.AI
cluster-session proposal.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "templates",
        sa.Column("owner", sa.String(255), primary_key=True),
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("templates")
