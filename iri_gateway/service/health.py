"""What a load balancer and an operator need to know about one replica: is it ready to take
requests, and how is its background work doing.

Ready means: not draining (a replica told to stop says so at once, so that a load balancer
sends it nothing more), start-up (migrations, the first reconcile) is over, the store's
database answers, and this replica's heartbeat reaches it (else the other replicas take it
for dead and take over its work, while it would still accept jobs). The poller, the
submitter and the leases are reported, not judged: a resource whose scheduler is down does
not make the gateway unable to accept, list or cancel jobs (they wait, see `submitter`), so
it must not take the replica out of the load balancer; it is what to alert on
(docs/operations.md). The same holds for the resources' health probes (`resource_health`): a
resource down is reported in `details.resource_health`, with each probe's words, and never
makes the replica unready.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.jobs.poller import Poller
from iri_gateway.service.operations.database import display_url


@dataclass(frozen=True)
class Readiness:
    """The verdict, the failed checks in words, and the figures behind them."""

    ready: bool
    problems: list[str]
    details: dict[str, Any] = field(default_factory=dict)
    draining: bool = False


def database_problem(engine: Engine) -> str | None:
    """Why the store's database cannot be used now, or None when `SELECT 1` works."""
    try:
        with engine.store.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as error:
        reason = " ".join(str(getattr(error, "orig", None) or error).split())[:300]
        return f"database {display_url(engine.store.engine.url)} does not answer: {reason}"
    return None


def resource_health(engine: Engine) -> dict[str, Any]:
    """Each resource's condition and its probes' latest results, as `/ready` shows them
    (`probing` false: the gateway does not probe, see the setting `resource_health_interval`)."""
    health = engine.resource_health
    snapshot = health.snapshot()
    return {
        "probing": health.probing,
        "interval_seconds": health.interval,
        "timeout_seconds": health.timeout,
        "resources": {
            resource_id: {
                "status": health.condition(resource_id),
                "checks": {
                    name: {
                        "kind": result.kind,
                        "ok": result.ok,
                        "detail": result.detail,
                        "checked_at": round(result.checked_at, 3),
                        "seconds": round(result.seconds, 3),
                    }
                    for name, result in checks.items()
                },
            }
            for resource_id, checks in snapshot.items()
        },
    }


def readiness(
    engine: Engine,
    poller: Poller | None,
    *,
    started: bool,
    draining: bool = False,
    now: float | None = None,
) -> Readiness:
    """The replica's readiness (see the module's docstring)."""
    now = time.time() if now is None else now
    replica = engine.replica
    problems: list[str] = []
    if draining:
        problems.append(
            "draining: this replica was told to stop (SIGTERM) and takes no new requests; "
            "send them to another replica"
        )
    if not started:
        problems.append("starting: migrations and the start-up reconcile are not done")
    database = database_problem(engine)
    if database is not None:
        problems.append(database)
    beat_age = None if replica.last_beat is None else max(0.0, now - replica.last_beat)
    if beat_age is None or beat_age > replica.timeout:
        problems.append(
            f"the heartbeat has not reached the database for {beat_age or 0:.0f} s (limit "
            f"{replica.timeout:g} s): the other replicas take this one for dead"
            + (f" ({replica.beat_error})" if replica.beat_error else "")
        )
    details: dict[str, Any] = {
        "replica": replica.id,
        "host": replica.host,
        "pid": replica.pid,
        "heartbeat_age_seconds": None if beat_age is None else round(beat_age, 3),
        "submissions_waiting_to_retry": engine.submitter.waiting(),
    }
    if poller is not None:
        details["polling"] = sorted(poller.polling)
        details["last_poll_cycle_age_seconds"] = (
            None if poller.last_cycle is None else round(max(0.0, now - poller.last_cycle), 3)
        )
        details["poll_errors"] = dict(poller.errors)
    details["resource_health"] = resource_health(engine)
    return Readiness(ready=not problems, problems=problems, details=details, draining=draining)
