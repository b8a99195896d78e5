"""The gateway's own keys (`gateway_keys`): secrets every replica must share, such as the key
that signs the port proxy's links and sessions; and the port proxy's used tickets
(`proxy_tickets`), so that a link opens once, on any replica.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision: str | None = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gateway_keys",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "proxy_tickets",
        sa.Column("nonce", sa.String(64), primary_key=True),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_proxy_tickets_expires_at", "proxy_tickets", ["expires_at"])


def downgrade() -> None:
    op.drop_table("proxy_tickets")
    op.drop_table("gateway_keys")
