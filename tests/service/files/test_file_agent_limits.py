"""The file agent's limits, without a server: the wall time kills a worker stuck in one step
and the agent serves the next request; the program a login node runs (`python3 -I -c`, one
request per run) sets the same limits itself."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from iri_gateway.service.files.agents import AgentLimits, Agents
from iri_gateway.transport.local import LocalTransport
from tests.service.files.agent_requests import compress_request


class LoginNodePython(LocalTransport):
    """This machine with a login node's interpreter: `python3` from PATH."""

    python = "python3"


def backtracking(folder: Path) -> dict[str, Any]:
    """A compress whose `match_pattern` backtracks for days over the one name in `folder`."""
    names = folder / "names"
    names.mkdir()
    (names / ("a" * 30 + "!")).write_text("x")
    return compress_request(folder, "names", match_pattern="(a+)+$", max_files=100, max_bytes=2**20)


def test_the_wall_time_kills_a_stuck_worker_and_the_agent_goes_on(tmp_path: Path) -> None:
    agents = Agents(LocalTransport(), where="here", limits=AgentLimits(wall=1.5), warm=1)
    try:
        began = time.monotonic()
        answer = agents.run(backtracking(tmp_path), idempotent=False)
        took = time.monotonic() - began
        assert answer["ok"] is False and answer["error"] == "limit", answer
        assert "took more than 1.5 s (the wall-clock limit" in answer["detail"], answer
        assert took < 10, took
        listed = agents.run(
            {
                "op": "ls",
                "base": str(tmp_path),
                "top": [],
                "reserved": [],
                "rest": [],
                "max_entries": 10,
            },
            idempotent=True,
        )
        assert [entry["name"] for entry in listed["result"]["entries"]] == ["names"], listed
    finally:
        agents.close()


def test_the_login_nodes_program_sets_the_same_cpu_limit(tmp_path: Path) -> None:
    agents = Agents(LoginNodePython(), where="login1", limits=AgentLimits(cpu=1))
    answer = agents.run(backtracking(tmp_path), idempotent=False)
    assert answer["ok"] is False and answer["error"] == "limit", answer
    assert answer["field"] == "match_pattern", answer
    assert "match_pattern took more than 1 s of CPU time" in answer["detail"], answer
    assert sorted(p.name for p in tmp_path.iterdir()) == ["names"]
