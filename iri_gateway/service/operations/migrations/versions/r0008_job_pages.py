"""Indexes for the pages of one user's jobs in creation order: on one resource
(`ix_jobs_pages`: owner, resource, created_at, id) and on all of them (`ix_jobs_owner_pages`:
owner, created_at, id, the console's newest-first list).

getJobs and the console's job list ask for `owner = ? AND resource_id = ? ... ORDER BY
created_at, id LIMIT n OFFSET k`. With an index on each column alone, the database read every
job of the user (or every job in a state), sorted them and skipped `k`: in a store of 100,000
jobs the first page of 100 cost 80 ms and a page at offset 5,000 340 ms on SQLite
(docs/benchmarks.md, "A store of 100,000 jobs"). With this index it walks the user's jobs on
the resource in page order and stops after the page; the console's list of every resource,
newest first, walks the second backwards.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision: str | None = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_pages", "jobs", ["owner", "resource_id", "created_at", "id"])
    op.create_index("ix_jobs_owner_pages", "jobs", ["owner", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_owner_pages", table_name="jobs")
    op.drop_index("ix_jobs_pages", table_name="jobs")
