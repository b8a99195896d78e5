"""Per-user quotas: what a user may hold at once (active jobs on a resource, unfinished
background tasks), checked by counting rows the store already has, so every replica
enforces the one quota without a counter of its own.

Refused with `QuotaError`: 429 Too Many Requests at the API, as a request rate (the user
asked for more at once than they may hold), with a `Retry-After` that is a suggestion of
when to look again: a quota frees when one of the user's jobs or tasks ends or is canceled,
which no clock can promise. The error names the limit, its value and the user's use.
"""

from __future__ import annotations

from iri_gateway.errors import GatewayError
from iri_gateway.models.job import JobState
from iri_gateway.service.operations.store import JobStore

ACTIVE_STATES = tuple(state for state in JobState if not state.final)
"""The states of a job that counts against `active_jobs_per_user`."""


JOB_QUOTA_RETRY_AFTER = 30
"""Seconds a launch refused by `active_jobs_per_user` is told to wait (`Retry-After`): about
how soon the gateway learns from a scheduler that a job ended."""


class QuotaError(GatewayError):
    """A user holds `limit_value` of what `limit` bounds already (429, with `retry_after`
    seconds as a suggestion of when to ask again)."""

    code = "quota"

    def __init__(
        self, message: str, *, limit: str, limit_value: int, used: int, retry_after: int
    ) -> None:
        super().__init__(message)
        self.limit, self.limit_value, self.used = limit, limit_value, used
        self.retry_after = retry_after


def check_active_jobs(store: JobStore, *, owner: str, resource_id: str, limit: int) -> None:
    """QuotaError when `owner` has `limit` unfinished jobs on `resource_id` already.

    Two launches racing on different replicas may both pass the count: the quota can be
    passed by the launches in flight at that moment (documented in docs/operations.md)."""
    used = store.count(owner=owner, resource_id=resource_id, states=ACTIVE_STATES)
    if used >= limit:
        raise active_jobs_error(owner=owner, resource_id=resource_id, limit=limit, used=used)


def active_jobs_error(*, owner: str, resource_id: str, limit: int, used: int) -> QuotaError:
    """The refusal of a launch past `active_jobs_per_user`: `owner` holds `used` unfinished
    jobs on `resource_id` (a bulk launch counts the ones it accepted before this one)."""
    return QuotaError(
        f"{owner} has {used} unfinished jobs on {resource_id} (not completed, failed or "
        f"canceled), the most a user may have there (active_jobs_per_user: {limit}): "
        "wait for one to end, or cancel one (cancelJob), then launch again",
        limit="active_jobs_per_user",
        limit_value=limit,
        used=used,
        retry_after=JOB_QUOTA_RETRY_AFTER,
    )
