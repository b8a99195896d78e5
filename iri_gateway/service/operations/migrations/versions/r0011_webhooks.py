"""Webhooks: users' standing subscriptions, their notify secrets, the outbox of deliveries
and the outbox's cursor in the event log (`webhook_*`).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision: str | None = "0010"
branch_labels = None
depends_on = None

_EVENT_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "webhook_subscriptions",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("resource_id", sa.String(63), nullable=True),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_webhook_subscriptions_owner", "webhook_subscriptions", ["owner"])
    op.create_table(
        "webhook_secrets",
        sa.Column("owner", sa.String(255), primary_key=True),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("subscription_id", sa.String(36), nullable=True),
        sa.Column("job_id", sa.String(36), nullable=True),
        sa.Column("resource_id", sa.String(63), nullable=True),
        sa.Column("event_id", _EVENT_ID, nullable=False),
        sa.Column("event_state", sa.String(16), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("next_attempt_at", sa.Float(), nullable=True),
        sa.Column("claimed_by", sa.String(36), nullable=True),
        sa.Column("claimed_until", sa.Float(), nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.UniqueConstraint("event_id", "target", name="uq_delivery_event_target"),
    )
    op.create_index("ix_deliveries_due", "webhook_deliveries", ["status", "next_attempt_at"])
    op.create_index(
        "ix_deliveries_subscription", "webhook_deliveries", ["subscription_id", "created_at"]
    )
    op.create_index("ix_deliveries_job", "webhook_deliveries", ["owner", "job_id", "created_at"])
    op.create_index("ix_deliveries_finished", "webhook_deliveries", ["finished_at"])
    op.create_table(
        "webhook_cursor",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("event_id", _EVENT_ID, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("webhook_cursor")
    op.drop_index("ix_deliveries_finished", "webhook_deliveries")
    op.drop_index("ix_deliveries_job", "webhook_deliveries")
    op.drop_index("ix_deliveries_subscription", "webhook_deliveries")
    op.drop_index("ix_deliveries_due", "webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_secrets")
    op.drop_index("ix_webhook_subscriptions_owner", "webhook_subscriptions")
    op.drop_table("webhook_subscriptions")
