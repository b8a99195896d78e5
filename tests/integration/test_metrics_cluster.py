"""`GET /metrics` of a real serve on the real Slurm test cluster through its SSH login node
(issue 27, item 1): a job launched on `cluster-ssh` shows as an `sbatch` timed by resource,
a submission `ok`, the poller's `statuses` commands, the job by state, and the SSH pool's
connection to the login node. A real Prometheus scraping a serve: test_metrics_prometheus.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.integration.conftest import running_cluster, write_cluster_profile
from tests.integration.gateway_process import API, serve
from tests.support.prometheus import Samples, samples, value

RESOURCE = "cluster-ssh"


def scrape(url: str) -> Samples:
    return samples(httpx.get(f"{url}/metrics", timeout=30).text)


def test_a_slurm_job_over_ssh_is_measured(tmp_path: Path) -> None:
    profile = write_cluster_profile(running_cluster(), tmp_path)
    env = {"IRI_GATEWAY_METRICS_ACCESS": "open", "IRI_GATEWAY_POLL_SLOW": "2"}
    with serve(profile, tmp_path / "data", env=env) as gateway:
        launched = httpx.post(
            f"{gateway.url}{API}/compute/job/{RESOURCE}",
            json={"executable": "/bin/true", "attributes": {"duration": 60}},
            headers=gateway.headers(),
            timeout=60,
        )
        assert launched.status_code == 200, launched.text + gateway.tracebacks()
        job_id = launched.json()["id"]
        deadline = time.monotonic() + 180
        while True:
            state = httpx.get(
                f"{gateway.url}{API}/compute/status/{RESOURCE}/{job_id}",
                headers=gateway.headers(),
                timeout=30,
            ).json()["status"]["state"]
            if state in ("completed", "failed", "canceled"):
                break
            assert time.monotonic() < deadline, f"job {job_id} still {state}"
            time.sleep(1)
        found = scrape(gateway.url)
    assert state == "completed"
    on = {"resource": RESOURCE}
    count = "iri_gateway_scheduler_command_duration_seconds_count"
    assert value(found, count, command="submit", **on) == 1
    assert value(found, count, command="statuses", **on) >= 1
    assert (
        value(found, "iri_gateway_scheduler_command_duration_seconds_sum", command="submit", **on)
        > 0
    )
    assert value(found, "iri_gateway_submissions_total", outcome="ok", **on) == 1
    assert value(found, "iri_gateway_launches_total", **on) == 1
    assert value(found, "iri_gateway_jobs", state="completed", **on) == 1
    assert value(found, "iri_gateway_ssh_connections", **on) >= 1
    assert ("iri_gateway_ssh_sessions", frozenset(on.items())) in found
    assert value(found, "iri_gateway_scheduler_command_failures_total", **on) == 0
