"""Poll leases shared among the live replicas (`Replica.share`), on the real PostgreSQL: each
replica holds the leases it is preferred for (rendezvous hashing), a holder hands over the
ones another live replica now prefers, a dead replica's leases go to the survivors, and a
lease is never held by two replicas at once nor left without holder longer than a check
(or, when its preferred replica never takes it, a heartbeat time-out).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.jobs.poller import Poller
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.replicas import Replica, preferred
from iri_gateway.service.operations.store import JobStore
from tests.service.operations.test_replica_store import Clock

RESOURCES = [f"poll:{name}" for name in ("perlmutter-gpu", "perlmutter-cpu", "frontier", "polaris")]
TIMEOUT = 5.0


@pytest.fixture
def store(postgres_url: str) -> Iterator[JobStore]:
    made = JobStore(postgres_url)
    yield made
    made.close()


def check(replicas: list[Replica], names: list[str]) -> list[set[str]]:
    """Each replica's check, in turn; no lease is held by two of them afterwards."""
    held = [replica.share(names) for replica in replicas]
    for index, mine in enumerate(held):
        for other in held[index + 1 :]:
            assert not mine & other, f"held by two replicas: {mine & other}"
    return held


def test_two_replicas_split_the_leases_and_a_dead_ones_go_to_the_survivor(
    store: JobStore,
) -> None:
    clock = Clock()
    a = Replica(store, clock=clock, timeout=TIMEOUT)
    assert a.share(RESOURCES) == set(RESOURCES), "alone, it holds every lease"
    b = Replica(store, clock=clock, timeout=TIMEOUT)
    live = [a.id, b.id]
    mine = {name for name in RESOURCES if preferred(name, live) == a.id}
    # B's first check: every lease is held by A, alive: B takes none.
    assert b.share(RESOURCES) == set()
    # A's next check: A hands over what B is preferred for; B takes it at its next.
    assert a.share(RESOURCES) == mine
    assert b.share(RESOURCES) == set(RESOURCES) - mine
    for _ in range(3):  # stable: nobody takes or hands over anything more
        clock.now += 1
        a.beat()
        b.beat()
        assert check([a, b], RESOURCES) == [mine, set(RESOURCES) - mine]
    assert sorted(a.leases() + b.leases()) == sorted(RESOURCES)

    # B dies (its heartbeat stops): A, alone alive, takes B's leases at its next check.
    clock.now += TIMEOUT + 1
    a.beat()
    assert a.share(RESOURCES) == set(RESOURCES)
    assert b.share(RESOURCES) == set(), "B, back late, finds them held by live A"


def test_many_leases_are_spread_about_evenly(store: JobStore) -> None:
    """With 64 leases and two replicas each holds about half (rendezvous hashing: the
    chance that one holds fewer than 16 is about 1 in 30,000)."""
    clock = Clock()
    names = [f"poll:resource-{index}" for index in range(64)]
    a, b = Replica(store, clock=clock), Replica(store, clock=clock)
    check([a, b], names)
    held = check([a, b], names)
    assert len(held[0]) + len(held[1]) == 64
    assert 16 <= len(held[0]) <= 48, [len(h) for h in held]
    c = Replica(store, clock=clock)  # a third comes: it gets about a third, the others keep
    before = [set(h) for h in held]
    check([a, b, c], names)
    held = check([a, b, c], names)
    assert sum(len(h) for h in held) == 64
    assert held[0] <= before[0] and held[1] <= before[1], "only leases moving to C move"
    assert len(held[2]) >= 8, [len(h) for h in held]


def test_a_lease_its_preferred_replica_never_takes_is_taken_after_a_timeout_and_kept(
    store: JobStore,
) -> None:
    """A process that registers but runs no poller (it never checks leases) is alive and
    preferred for some leases: the others take those once they stayed free for a heartbeat
    time-out, and keep them (no handing back and forth) while it stays preferred."""
    clock = Clock()
    names = [f"poll:resource-{index}" for index in range(64)]
    a = Replica(store, clock=clock, timeout=TIMEOUT)
    idle = Replica(store, clock=clock, timeout=TIMEOUT)
    orphans = {name for name in names if preferred(name, [a.id, idle.id]) == idle.id}
    assert orphans, "64 leases, none preferring the idle one: a chance of 2**-64"
    assert a.share(names) == set(names) - orphans, "left to the preferred one"
    clock.now += TIMEOUT / 2
    a.beat(), idle.beat()
    assert a.share(names) == set(names) - orphans, "not yet: it may take them"
    clock.now += TIMEOUT / 2 + 0.1
    a.beat(), idle.beat()
    assert a.share(names) == set(names), "free a whole time-out: taken"
    for _ in range(3):
        clock.now += 1
        a.beat(), idle.beat()
        assert a.share(names) == set(names), "kept, not handed back and forth"


def test_two_pollers_split_four_resources_and_the_survivor_polls_them_all(
    postgres_url: str, tmp_path: Path
) -> None:
    """Two gateway engines on one PostgreSQL store, with four resources (the shipped
    Perlmutter, Frontier and Polaris profiles): their pollers poll each resource once
    between them, each the resources it is preferred for; when one stops, the other polls
    all four at its next lease check."""
    registry = ProfileRegistry.from_files(
        [builtin_profile(name) for name in ("nersc-perlmutter", "olcf-frontier", "alcf-polaris")]
    )
    resources = set(registry.ids())
    assert {f"poll:{r}" for r in resources} == set(RESOURCES)
    engines = [
        Engine(registry=registry, store=JobStore(postgres_url), backends=Backends(tmp_path / n))
        for n in ("a", "b")
    ]
    try:
        pollers = [Poller(engine, reconcile_every=0) for engine in engines]  # checks each cycle
        for _ in range(3):  # A alone first: every lease; B: none; A hands over; B takes
            for poller in pollers:
                poller.cycle()
                assert not pollers[0].polling & pollers[1].polling, "polled by both"
        live = [engine.replica.id for engine in engines]
        for poller, engine in zip(pollers, engines, strict=True):
            mine = {r for r in resources if preferred(f"poll:{r}", live) == engine.replica.id}
            assert poller.polling == mine
        assert pollers[0].polling | pollers[1].polling == resources
        engines[1].replica.stop()  # gives up its leases: the survivor takes them at once
        pollers[0].cycle()
        assert pollers[0].polling == resources
    finally:
        for engine in engines:
            engine.close()
