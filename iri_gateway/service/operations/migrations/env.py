"""Alembic's entry point: migrations run on the connection `upgrade_schema` hands over, inside
the transaction (and, on PostgreSQL, the advisory lock) it holds; never a URL of its own."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

connection = context.config.attributes["connection"]
assert isinstance(connection, Connection), "run through upgrade_schema, not the alembic CLI"
context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
