"""The console's OpenID sign-in (issue 31): its sessions (`console_sessions`) and the sign-ins
under way (`sign_in_attempts`), shared by every replica.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision: str | None = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id_digest", sa.String(64), primary_key=True),
        sa.Column("user", sa.String(255), nullable=False),
        sa.Column("sealed_access_token", sa.Text(), nullable=False),
        sa.Column("sealed_id_token", sa.Text(), nullable=False),
        sa.Column("csrf_digest", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_console_sessions_user", "console_sessions", ["user"])
    op.create_index("ix_console_sessions_expires_at", "console_sessions", ["expires_at"])
    op.create_table(
        "sign_in_attempts",
        sa.Column("state_digest", sa.String(64), primary_key=True),
        sa.Column("binding_digest", sa.String(64), nullable=False),
        sa.Column("nonce", sa.String(128), nullable=False),
        sa.Column("verifier", sa.String(128), nullable=False),
        sa.Column("next_page", sa.String(512), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_sign_in_attempts_expires_at", "sign_in_attempts", ["expires_at"])


def downgrade() -> None:
    op.drop_table("sign_in_attempts")
    op.drop_table("console_sessions")
