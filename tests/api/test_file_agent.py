"""File work runs in the file agent, never in the serving process (issue 23, item 1), on real
`iri-gateway serve` processes on the `local` resource.

A `match_pattern` that backtracks for days (`(a+)+$` over a name of 30 a's and a '!') does
not stall `/health` (polled every 50 ms, each answer within 200 ms), its task's cancel is
answered at once and stops the work within about a second, nothing left; with a short CPU
limit the same task fails naming the limit. A compress beyond the address-space limit fails
naming it while the server answers. kill -9 of the agent or of its worker midway fails the
task as a retryable 503, and the next operations work.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from iri_gateway.service.files import shipping
from tests.api.task_site import Site, gateway
from tests.api.test_filesystem import auth
from tests.api.test_tasks import V2, read, start, watch

PATTERN = "(a+)+$"
HEALTH_WITHIN = 0.2
"""Seconds `/health` must answer in while a pathological task runs (a loaded machine)."""


def pathological(site: Site) -> dict[str, str]:
    """A folder whose one name makes `PATTERN` backtrack for days, and a compress of it."""
    folder = site.home / "names"
    folder.mkdir()
    (folder / ("a" * 30 + "!")).write_text("x")
    return {"path": str(folder), "target_path": f"{site.home}/made.tgz", "match_pattern": PATTERN}


@contextmanager
def health_watch(url: str) -> Iterator[list[float]]:
    """`/health` asked every 50 ms on a thread of its own until the block ends: the seconds
    each answer took (a failed request counts as infinite)."""
    times: list[float] = []
    stop = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=url, timeout=10) as http:
            http.get("/health")  # the connection made before the timing starts
            ready.set()
            while not stop.is_set():
                began = time.monotonic()
                try:
                    ok = http.get("/health").status_code == 200
                except httpx.HTTPError:
                    ok = False
                times.append(time.monotonic() - began if ok else float("inf"))
                stop.wait(0.05)

    ready = threading.Event()
    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    ready.wait(timeout=10)
    try:
        yield times
    finally:
        stop.set()
        thread.join(timeout=15)


def agent_processes(server_pid: int) -> dict[int, list[int]]:
    """The file agents the server started (their pid) and each one's workers."""
    parents: dict[int, int] = {}
    commands: dict[int, bytes] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
            commands[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        ppid = next(line for line in status.splitlines() if line.startswith("PPid:"))
        parents[int(entry)] = int(ppid.split()[1])
    entry = repr(shipping.FILE_AGENT[-1].__name__).encode()  # named in the packed program
    agents = [
        pid
        for pid, parent in parents.items()
        if parent == server_pid and entry in commands.get(pid, b"")
    ]
    return {agent: [pid for pid, parent in parents.items() if parent == agent] for agent in agents}


def wait_until_dead(pid: int) -> None:
    """Until `pid` has exited (gone, or a zombie its parent has not reaped yet)."""
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            if "State:\tZ" in Path(f"/proc/{pid}/status").read_text():
                return
        except OSError:
            return
        time.sleep(0.02)
    raise AssertionError(f"{pid} lives on after kill -9")


def wait_for_worker(server_pid: int, deadline: float = 30) -> tuple[int, int]:
    """An agent of the server's with a worker: (agent, worker)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        for agent, workers in agent_processes(server_pid).items():
            if workers:
                return agent, workers[0]
        time.sleep(0.05)
    raise AssertionError("no file agent worker seen")


def failed_with_413(http: httpx.Client, user: str, body: dict[str, str]) -> dict[str, Any]:
    """The problem of the compress of `body`, which must fail with a 413."""
    task = watch(http, user, start(http, user, "compress", body), deadline=30)[1]
    assert task["status"] == "failed", task
    problem: dict[str, Any] = task["result"]["error"]
    assert problem["status"] == 413, problem
    return problem


def test_a_backtracking_pattern_stalls_nothing_and_its_cancel_is_at_once(
    site: Site, tmp_path: Path
) -> None:
    body = pathological(site)
    before = sorted(p.name for p in site.home.iterdir())
    with (
        gateway(site.profile, tmp_path / "data", site.tokens) as served,
        httpx.Client(base_url=served.url, timeout=60) as http,
    ):
        with health_watch(served.url) as times:
            task_id = start(http, site.alice, "compress", body)
            watch(http, site.alice, task_id, until=lambda task: task["status"] == "active")
            time.sleep(2.0)  # the work is deep in the regex meanwhile
            assert read(http, site.alice, task_id)["status"] == "active"
            began = time.monotonic()
            answer = http.delete(f"{V2}/task/{task_id}", headers=auth(site.alice))
            answered = time.monotonic() - began
            assert answer.status_code == 200, answer.text
            task = watch(
                http,
                site.alice,
                task_id,
                deadline=10,
                until=lambda task: (task["result"] or {}).get("stopped") is True,
            )[1]
            stopped = time.monotonic() - began
        assert answered < 1.0, f"the cancel took {answered:.2f} s to be answered"
        assert task["status"] == "canceled", task
        assert stopped < 2.0, f"the task ran {stopped:.2f} s past its cancel"
        assert len(times) >= 20, times
        assert max(times) < HEALTH_WITHIN, f"/health took up to {max(times):.3f} s"
        left = agent_processes(served.process.pid)
        assert all(not workers for workers in left.values()), left
    assert sorted(p.name for p in site.home.iterdir()) == before, "nothing left at the target"


def test_a_pattern_out_of_cpu_time_fails_its_task_naming_the_limit(
    site: Site, tmp_path: Path
) -> None:
    body = pathological(site)
    before = sorted(p.name for p in site.home.iterdir())
    with (
        gateway(
            site.profile, tmp_path / "data", site.tokens, IRI_GATEWAY_FILE_AGENT_CPU_SECONDS="2"
        ) as served,
        httpx.Client(base_url=served.url, timeout=60) as http,
        health_watch(served.url) as times,
    ):
        problem = failed_with_413(http, site.alice, body)
    assert "match_pattern took more than 2 s of CPU time" in problem["detail"], problem
    assert "simpler pattern" in problem["detail"], problem
    assert max(times) < HEALTH_WITHIN, f"/health took up to {max(times):.3f} s"
    assert sorted(p.name for p in site.home.iterdir()) == before


def test_a_compress_beyond_the_address_space_limit_is_refused_naming_it(
    site: Site, tmp_path: Path
) -> None:
    """xz needs about 94 MiB to compress: with the agent's worker limited to 80 MiB the
    operation fails naming the limit, in the worker, while the server answers."""
    (site.home / "src").mkdir()
    (site.home / "src" / "f").write_text("some text\n" * 100)
    body = {
        "path": f"{site.home}/src",
        "target_path": f"{site.home}/made.txz",
        "compression": "urn:doe-iri:compression:xz",
    }
    with (
        gateway(
            site.profile,
            tmp_path / "data",
            site.tokens,
            IRI_GATEWAY_FILE_AGENT_MEMORY_BYTES=str(80 * 2**20),
        ) as served,
        httpx.Client(base_url=served.url, timeout=60) as http,
    ):
        problem = failed_with_413(http, site.alice, body)
        assert "more than 80 MiB of memory" in problem["detail"], problem
        assert http.get("/health").status_code == 200
        listed = http.post(
            f"{V2}/filesystem/ls/local", json={"path": str(site.home)}, headers=auth(site.alice)
        )
        assert listed.status_code == 200, listed.text
        shown = watch(http, site.alice, listed.json()["task_id"])[1]["result"]["output"]
        assert [entry["name"] for entry in shown] == ["src"], shown


def test_kill_9_of_the_agent_or_its_worker_fails_the_task_and_the_next_work_goes_on(
    site: Site, tmp_path: Path
) -> None:
    body = pathological(site)
    with (
        gateway(site.profile, tmp_path / "data", site.tokens) as served,
        httpx.Client(base_url=served.url, timeout=60) as http,
    ):
        for victim in ("agent", "worker"):
            task_id = start(http, site.alice, "compress", body)
            agent, worker = wait_for_worker(served.process.pid)
            os.kill(agent if victim == "agent" else worker, signal.SIGKILL)
            task = watch(http, site.alice, task_id, deadline=30)[1]
            assert task["status"] == "failed", (victim, task)
            assert task["result"]["error"]["status"] == 503, (victim, task)
            assert http.get("/health").status_code == 200
            deadline = time.monotonic() + 10
            while worker in {w for ws in agent_processes(served.process.pid).values() for w in ws}:
                assert time.monotonic() < deadline, f"the {victim}'s worker lives on"
                time.sleep(0.05)
        idle = list(agent_processes(served.process.pid))
        assert idle, "no warm agent kept"
        for agent in idle:  # kill -9 of idle agents: the next requests take fresh ones
            os.kill(agent, signal.SIGKILL)
        for agent in idle:
            wait_until_dead(agent)
        for _ in range(3):
            listed = http.post(
                f"{V2}/filesystem/ls/local", json={"path": str(site.home)}, headers=auth(site.alice)
            )
            assert listed.status_code == 200, listed.text
            task = watch(http, site.alice, listed.json()["task_id"])[1]
            assert task["status"] == "completed", task
        again = start(http, site.alice, "compress", {**body, "match_pattern": "a"})
        assert watch(http, site.alice, again, deadline=30)[1]["status"] == "completed"
    assert (site.home / "made.tgz").is_file()
