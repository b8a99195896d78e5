"""The console's sign-in attempts and sessions in the store, on SQLite and on a real
PostgreSQL: an attempt is finished once even when callbacks race on two replicas (one
`DELETE ... RETURNING` decides), and a session survives the process that opened it (a
replica killed with -9 loses no session: it is a row, not memory)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from typing import Any

from iri_gateway.service.accounts.console_sessions import ConsoleSessions
from iri_gateway.service.accounts.openid_sign_in import Attempt
from iri_gateway.service.operations.store import JobStore

RACERS = 8
ROUNDS = 20


def race(sessions: list[ConsoleSessions], state: str, binding: str) -> list[Attempt | None]:
    """What `RACERS` callbacks of one attempt get, let go at once on two replicas."""
    start = threading.Barrier(RACERS)
    taken: list[Attempt | None] = []

    def callback(index: int) -> None:
        start.wait()
        taken.append(sessions[index % 2].take_attempt(state, binding))

    threads = [threading.Thread(target=callback, args=(i,)) for i in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return taken


def test_an_attempt_is_taken_once_by_racing_callbacks(database_url: str) -> None:
    sessions = [ConsoleSessions(JobStore(database_url)) for _ in range(2)]  # two replicas
    for round_ in range(ROUNDS):
        state = f"state-{round_}"
        binding = sessions[0].save_attempt(Attempt(state, "n", "v", "/console/jobs", 4e9))
        taken = race(sessions, state, binding)
        assert len(taken) == RACERS
        assert len([a for a in taken if a is not None]) == 1, f"round {round_}: {taken}"


def _open_and_die(url: str, answer: Any) -> None:
    opened = ConsoleSessions(JobStore(url)).open("alice", "access", "id", None, lifetime=600)
    answer.send(opened.cookie)  # a pipe's send is written when it returns
    os.kill(os.getpid(), signal.SIGKILL)  # no clean-up of any kind


def test_a_session_outlives_the_replica_that_opened_it(database_url: str) -> None:
    JobStore(database_url)  # migrated before the replica opens it
    context = multiprocessing.get_context("fork")
    reading, answer = context.Pipe(duplex=False)
    replica = context.Process(target=_open_and_die, args=(database_url, answer))
    replica.start()
    assert reading.poll(60), "the replica never opened a session"
    cookie = reading.recv()
    replica.join(timeout=60)
    assert replica.exitcode == -signal.SIGKILL
    found = ConsoleSessions(JobStore(database_url)).find(cookie)
    assert found is not None and found.user == "alice" and found.access_token == "access"
