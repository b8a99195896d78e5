"""The SSH transport's pool of connections, against a scripted stand-in for paramiko.

The stand-in (`StandinServer`, `StandinClient`, in tests/standins/ssh_standin.py) plays an
sshd that allows `max_sessions` sessions per connection and refuses more with paramiko's
ChannelException, as OpenSSH does with "no more sessions"; its commands are scripted (`ok`,
`block` until released, `lose` the exit status, `die` with the connection, `raw OUT ERR`
prints the bytes given in hex). It stands in for the network only: the real sshd is exercised by
tests/integration/test_ssh_concurrency.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from iri_gateway.transport.base import CommandResult, NotSentError, OutcomeUnknownError
from iri_gateway.transport.ssh import SshTransport
from tests.standins.ssh_standin import PoolOnStandin, StandinServer


def run_all(commands: list[Callable[[], CommandResult]]) -> list[CommandResult | Exception]:
    """Run the calls in threads at once; their results (or errors) in order."""
    results: list[CommandResult | Exception | None] = [None] * len(commands)

    def one(index: int) -> None:
        try:
            results[index] = commands[index]()
        except Exception as error:  # collected for the test to look at
            results[index] = error

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(commands))]
    for thread in threads:
        thread.start()
    return _joined(threads, results)


def _joined(threads: list[threading.Thread], results: list[Any]) -> list[Any]:
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive(), "a command hung"
    return results


def wait_until(condition: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_refused_session_is_sent_on_another_connection_and_none_is_closed() -> None:
    """The server allows fewer sessions than the transport would use: the refusals are
    retried elsewhere, every command gets its real result, and no connection is closed."""
    server = StandinServer(max_sessions=2)
    transport = PoolOnStandin(server, max_sessions=4, max_connections=4)
    server.release.set()
    results = run_all([lambda i=i: transport.run(["block", str(i)]) for i in range(12)])
    assert [r.stdout if isinstance(r, CommandResult) else r for r in results] == [
        f"block {i}\n" for i in range(12)
    ]
    assert all(isinstance(r, CommandResult) and r.exit_code == 0 for r in results)
    assert not any(c.closed_while_busy for c in server.connections)
    assert all(c.active for c in server.connections), "no live connection was dropped"
    assert sorted(server.ran) == sorted(f"block {i}" for i in range(12)), "each ran once"


def test_refusal_does_not_close_the_connection_under_running_commands() -> None:
    server = StandinServer(max_sessions=2)
    transport = PoolOnStandin(server, max_sessions=3, max_connections=2)
    threads = [threading.Thread(target=transport.run, args=(["block", str(i)],)) for i in range(2)]
    for thread in threads:
        thread.start()
    wait_until(lambda: server.connections and server.connections[0].sessions == 2)
    first = server.connections[0]
    extra = transport.run(["ok"])  # refused on the first connection, sent on a second one
    assert extra.exit_code == 0 and extra.stdout == "ok\n"
    assert server.refusals >= 1
    assert first.active and not first.closed_while_busy
    server.release.set()
    for thread in threads:
        thread.join(timeout=10)
    assert len(server.connections) == 2


def test_sessions_per_connection_and_connections_are_bounded() -> None:
    """At most `max_sessions` per connection and `max_connections` connections: the
    seventh command waits for a free session instead of being refused."""
    server = StandinServer(max_sessions=10)
    transport = PoolOnStandin(server, max_sessions=3, max_connections=2)
    results: list[Any] = [None] * 7

    def one(index: int) -> None:
        results[index] = transport.run(["block", str(index)])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(7)]
    for thread in threads:
        thread.start()
    wait_until(lambda: sum(c.sessions for c in server.connections) == 6)
    time.sleep(0.2)
    assert len(server.connections) == 2
    assert [c.sessions for c in server.connections] == [3, 3]
    assert len(server.ran) == 6, "the seventh waits, unsent"
    server.release.set()
    _joined(threads, results)
    assert all(r.exit_code == 0 for r in results)
    assert server.most_sessions == 3 and server.refusals == 0


def test_no_free_session_in_time_is_not_sent() -> None:
    server = StandinServer()
    transport = PoolOnStandin(server, max_sessions=1, max_connections=1, connect_timeout=0.3)
    blocker = threading.Thread(target=transport.run, args=(["block"],))
    blocker.start()
    wait_until(lambda: server.ran == ["block"])
    with pytest.raises(NotSentError, match=r"no SSH session .* became free in time"):
        transport.run(["ok"], timeout=0.3)
    server.release.set()
    blocker.join(timeout=10)
    assert server.ran == ["block"]


def test_missing_exit_status_is_an_unknown_outcome_not_a_result() -> None:
    """A channel that closes without an exit status is no `exited -1`: a submission gets
    OutcomeUnknownError, and the (live) connection stays for the next command."""
    server = StandinServer()
    transport = PoolOnStandin(server)
    with pytest.raises(OutcomeUnknownError, match="outcome is unknown"):
        transport.run(["lose", "sbatch"])
    assert transport.run(["ok"]).exit_code == 0
    assert len(server.connections) == 1 and server.connections[0].active


def test_idempotent_command_is_sent_again_when_its_exit_status_is_lost() -> None:
    server = StandinServer(lose_first={"squeue"})
    transport = PoolOnStandin(server)
    result = transport.run(["squeue"], idempotent=True)
    assert result.exit_code == 0 and result.stdout == "squeue\n"
    assert server.ran == ["squeue", "squeue"]


def test_dead_connection_is_dropped_without_touching_the_others() -> None:
    server = StandinServer(max_sessions=1)
    transport = PoolOnStandin(server, max_sessions=1, max_connections=3)
    outcomes: dict[str, Any] = {}

    def run(name: str, argv: list[str]) -> None:
        try:
            outcomes[name] = transport.run(argv)
        except Exception as error:  # looked at below
            outcomes[name] = error

    survivor = threading.Thread(target=run, args=("survivor", ["block", "survivor"]))
    survivor.start()
    wait_until(lambda: len(server.connections) == 1 and server.connections[0].sessions == 1)
    victim = threading.Thread(target=run, args=("victim", ["block", "victim"]))
    victim.start()
    wait_until(lambda: len(server.connections) == 2 and server.connections[1].sessions == 1)
    alive, dying = server.connections
    dying.kill()
    victim.join(timeout=10)
    assert isinstance(outcomes["victim"], OutcomeUnknownError)
    assert transport.run(["ok"]).exit_code == 0  # on a new connection; the dead one is gone
    assert dying.closed, "the dead connection was released"
    assert alive.active and not alive.closed and not alive.closed_while_busy
    assert all(c.get_transport() is not dying for c in transport.connections())
    server.release.set()
    survivor.join(timeout=10)
    assert outcomes["survivor"].stdout == "block survivor\n"


def test_unreachable_login_node_is_not_sent_after_the_attempts() -> None:
    class Unreachable(SshTransport):
        tries = 0

        def _connect(self) -> Any:
            Unreachable.tries += 1
            raise OSError("Connection refused")

    transport = Unreachable(
        host="login", port=22, username="alice", known_hosts="/dev/null", backoff=0.01, attempts=3
    )
    with pytest.raises(NotSentError, match="after 3 attempts: Connection refused"):
        transport.run(["sbatch"])
    assert Unreachable.tries == 3
