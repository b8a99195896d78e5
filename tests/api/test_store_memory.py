"""The server's memory stays bounded whatever the number of jobs (issue 11, item 6).

The store kept every job record it ever read or wrote in memory for the life of the process
(10-17 KB each). Now it keeps the most recently used `CACHE_RECORDS` (4096). The test fills a
real server's database with 20,000 finished jobs of about 11 KB each, reads every one
through getJob (and all of them again through getJobs), and bounds the growth of the
server's resident memory (VmRSS of the `serve` process).

Measured on the development machine: an unbounded cache grows by about 470 MB over these
reads, the bounded one by about 100 MB (4096 records of ~24 KB in memory, plus the
database layer's own caches). The bound, 250 MB, lies between the two with room on both sides
(a loaded CI machine once measured 200 MB for the bounded cache; the unbounded one is twice
the bound).
"""

from __future__ import annotations

import http.client
import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.service.accounts.auth import TokenFile
from iri_gateway.service.operations.store import JobStore
from tests.conftest import UNHURRIED
from tests.support.serve import running_serve

JOBS = 20_000
GROWTH_BOUND_MB = 250
V2 = "/api/v2"


def resident_mb(pid: int) -> float:
    """VmRSS of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def fill_store(database: Path) -> list[str]:
    """JOBS finished jobs of alice on `local`: one recorded through JobStore as the engine
    records a job (planned, then completed), the others copies of its row with their own id
    and times, written in one SQL statement (20,000 commits through JobStore take minutes).
    """
    store = JobStore(f"sqlite:///{database}")
    spec = parse_jobspec(
        {
            "executable": "/bin/echo",
            "arguments": [f"--option-{i}=" + "v" * 60 for i in range(16)],
            "environment": {f"VARIABLE_{i}": "x" * 60 for i in range(16)},
            "attributes": {"account": "proj1"},
        }
    )
    plan = make_plan(spec, ProfileRegistry.from_paths([builtin_profile("local")]).get("local"))
    first = store.create(
        owner="alice",
        resource_id="local",
        spec=spec.model_dump(mode="json", exclude_unset=True),
        effective_spec=spec.model_dump(mode="json"),
        plan=plan.model_dump(mode="json"),
        script=plan.script,
    )
    store.transition(first.id, JobState.COMPLETED, "completed", exit_code=0)
    store.engine.dispose()
    with sqlite3.connect(database) as connection:
        columns = [row[1] for row in connection.execute("PRAGMA table_info(jobs)")]
        varied = {
            "id": "printf('%08d-0000-4000-8000-000000000000', n)",
            "created_at": "created_at + n",
            "updated_at": "updated_at + n",
        }
        chosen = ", ".join(varied.get(column, column) for column in columns)
        connection.execute(
            f"WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq "
            f"WHERE n < {JOBS - 1}) INSERT INTO jobs ({', '.join(columns)}) "
            f"SELECT {chosen} FROM jobs, seq"
        )
        ids = [row[0] for row in connection.execute("SELECT id FROM jobs")]
    assert len(ids) == JOBS
    return ids


def read_jobs(url: str, token: str, ids: list[str]) -> int:
    """getJob of every id on one kept-alive connection; the number found completed.

    `http.client` rather than httpx: 20,000 requests on a 2-core machine, and the client's
    own work per request should not decide how long the test takes. Two of these run at
    once, so the server always has a request to answer.
    """
    address = urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=60)
    completed = 0
    try:
        for job_id in ids:
            connection.request(
                "GET",
                f"{V2}/compute/status/local/{job_id}",
                headers={"Authorization": f"Bearer {token}"},
            )
            answer = connection.getresponse()
            body = answer.read()
            assert answer.status == 200, body[:500]
            completed += json.loads(body)["status"]["state"] == "completed"
    finally:
        connection.close()
    return completed


def test_memory_stays_bounded_after_reading_20000_jobs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    ids = fill_store(data / "jobs.db")
    token = TokenFile(data / "tokens.json").issue("alice", ["proj1"])
    headers = {"Authorization": f"Bearer {token}"}
    # One user reads 20,000 jobs as fast as two threads can: far past the default read rate,
    # which is not what this test measures.
    with (
        running_serve(data, extra_env=UNHURRIED) as served,
        httpx.Client(base_url=served.url, headers=headers, timeout=60) as client,
    ):
        for job_id in ids[:10]:  # warm up: the first requests load code and connections
            assert client.get(f"{V2}/compute/status/local/{job_id}").status_code == 200
        before = resident_mb(served.process.pid)

        with ThreadPoolExecutor(2) as pool:
            states = pool.map(read_jobs, [served.url] * 2, [token] * 2, [ids[0::2], ids[1::2]])
            assert list(states) == [JOBS // 2, JOBS // 2]
        listed = 0
        for offset in range(0, JOBS, 1000):
            page = client.post(
                f"{V2}/compute/status/local",
                params={"historical": "true", "offset": offset, "limit": 1000},
            )
            assert page.status_code == 200, page.text
            listed += len(page.json())
        assert listed == JOBS

        growth = resident_mb(served.process.pid) - before
    assert growth < GROWTH_BOUND_MB, (
        f"the server grew by {growth:.0f} MiB reading {JOBS} jobs (bound {GROWTH_BOUND_MB})"
    )
