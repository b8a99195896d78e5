"""Per-resource health (issue 27, item 7) on a real `iri-gateway serve` of the test cluster and
the real OpenPBS: each resource's scheduler, login node and file roots probed in the
background with a time-out, the verdict in `getResources` and in `/metrics`, and the probes'
words in `/ready`.

One server, five resources, each in the state a test needs (no shared service is stopped):
- `cluster-ssh` and `pbs-ssh`: Slurm and PBS through the real SSH login node: up;
- `pbs`: PBS on this machine: up;
- `missing-root`: `cluster-ssh` with one more file root that does not exist: degraded,
  naming that root, in `stat`'s words;
- `closed-port`: `cluster-ssh` pointing at a port nobody listens on: down, in the SSH
  error's words, within the time-out;
- `cluster`: Slurm on this machine, where the server's `scontrol` is a wrapper whose `ping`
  sleeps 60 s (found first on its PATH; every other `scontrol` call is the real one): down,
  cut at the time-out (by the command's own time-out), while requests are answered at once;
- `silent-login`: `cluster-ssh` pointing at a port that takes connections and never says a
  word (a listening socket nobody accepts from: a hung sshd), where paramiko would wait for
  the banner 10 s per attempt: down, cut by the probe's time-out, not by SSH's.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import ClusterInfo, PbsInfo
from tests.integration.gateway_process import serve
from tests.support.serve import free_port

pytestmark = pytest.mark.integration

TIMEOUT = 3
HANGING_SCONTROL = """#!/bin/sh
# The health probe's `scontrol ping` hangs; every other scontrol call is the real one.
if [ "$1" = ping ]; then sleep 60; fi
exec /usr/bin/scontrol "$@"
"""


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port of 127.0.0.1 that takes TCP connections (the kernel completes them) and never
    answers on them."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def health_profile(
    cluster_profile: Path, pbs_profile: Path, folder: Path, silent_port: int
) -> Path:
    """The resources of the module's docstring, in one profile file per facility."""
    slurm: dict[str, Any] = yaml.safe_load(cluster_profile.read_text())
    by_id = {r["id"]: r for r in slurm["resources"]}
    missing = {
        **by_id["cluster-ssh"],
        "id": "missing-root",
        "files": {"roots": ["~", "/nonexistent-iri-health/{account}"]},
    }
    closed_ssh = {**by_id["cluster-ssh"]["connection"]["ssh"], "port": free_port()}
    closed = {
        **by_id["cluster-ssh"],
        "id": "closed-port",
        "connection": {"mode": "ssh", "ssh": closed_ssh},
    }
    silent_ssh = {**by_id["cluster-ssh"]["connection"]["ssh"], "port": silent_port}
    silent = {
        **by_id["cluster-ssh"],
        "id": "silent-login",
        "connection": {"mode": "ssh", "ssh": silent_ssh},
    }
    slurm["resources"] = [by_id["cluster"], by_id["cluster-ssh"], missing, closed, silent]
    (folder / "slurm.yaml").write_text(yaml.safe_dump(slurm, sort_keys=False))
    pbs: dict[str, Any] = yaml.safe_load(pbs_profile.read_text())
    pbs["resources"] = [r for r in pbs["resources"] if r["id"] in ("pbs", "pbs-ssh")]
    (folder / "pbs.yaml").write_text(yaml.safe_dump(pbs, sort_keys=False))
    return folder


def statuses(http: httpx.Client) -> dict[str, str]:
    answer = http.get("/api/v2/status/resources")
    assert answer.status_code == 200, answer.text
    return {r["id"]: r["current_status"] for r in answer.json()}


def test_probes_show_in_status_and_ready(
    cluster: ClusterInfo,
    cluster_profile: Path,
    pbs: PbsInfo,
    pbs_profile: Path,
    silent_port: int,
    tmp_path: Path,
) -> None:
    profiles = health_profile(cluster_profile, pbs_profile, tmp_path, silent_port)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(HANGING_SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "IRI_GATEWAY_RESOURCE_HEALTH_INTERVAL": "2",
        "IRI_GATEWAY_RESOURCE_HEALTH_TIMEOUT": str(TIMEOUT),
        "IRI_GATEWAY_POLL_SLOW": "5",
        "IRI_GATEWAY_METRICS_ACCESS": "open",
    }
    expected = {
        "cluster": "down",
        "cluster-ssh": "up",
        "missing-root": "degraded",
        "closed-port": "down",
        "silent-login": "down",
        "pbs": "up",
        "pbs-ssh": "up",
    }
    with (
        serve(profiles, tmp_path / "data", env=env) as gateway,
        httpx.Client(base_url=gateway.url, timeout=30) as http,
    ):
        began = time.monotonic()
        seen = statuses(http)
        assert set(seen) == set(expected)
        # Before a probe has answered (the first round waits for the hanging one), or
        # already judged: never up while the scheduler hangs.
        assert seen["cluster"] in ("unknown", "down"), seen
        while seen != expected:
            assert time.monotonic() - began < 6 * TIMEOUT + 10, (seen, gateway.tracebacks())
            time.sleep(0.5)
            seen = statuses(http)
        # The hanging probe holds a thread of its own, never a request.
        for _ in range(5):
            start = time.monotonic()
            one = http.get("/api/v2/status/resources/cluster")
            assert one.status_code == 200 and one.json()["current_status"] == "down"
            assert time.monotonic() - start < 1.0
        filtered = http.get("/api/v2/status/resources", params={"current_status": "degraded"})
        assert [r["id"] for r in filtered.json()] == ["missing-root"]

        ready = http.get("/ready")
        assert ready.status_code == 200, ready.text  # a resource down is no replica fault
        health = ready.json()["details"]["resource_health"]
        assert health["probing"] is True and health["timeout_seconds"] == TIMEOUT
        resources = health["resources"]
        assert {rid: r["status"] for rid, r in resources.items()} == expected

        hung = resources["cluster"]["checks"]["scheduler"]
        assert hung["ok"] is False
        assert any(
            words in hung["detail"] for words in ("timed out after 3 s", "no answer", "hangs")
        ), hung
        assert hung["seconds"] <= TIMEOUT + 0.5, hung

        silent = resources["silent-login"]["checks"]["login"]
        assert silent["ok"] is False
        assert "no answer within 3 s" in silent["detail"] or "hangs" in silent["detail"], silent
        assert resources["cluster"]["checks"]["login"]["ok"] is True

        refused = resources["closed-port"]["checks"]["login"]
        assert refused["ok"] is False
        assert "Unable to connect" in refused["detail"], refused
        assert refused["seconds"] <= TIMEOUT + 0.5, refused

        root = resources["missing-root"]["checks"]["file root /nonexistent-iri-health/{account}"]
        assert root["ok"] is False
        assert "No such file or directory" in root["detail"], root
        assert resources["missing-root"]["checks"]["file root ~"]["ok"] is True
        assert resources["missing-root"]["checks"]["scheduler"]["ok"] is True

        for rid in ("cluster-ssh", "pbs", "pbs-ssh"):
            checks = resources[rid]["checks"]
            assert all(c["ok"] for c in checks.values()), (rid, checks)
            assert set(checks) >= {"scheduler", "login"}
            assert all(0 <= c["seconds"] < TIMEOUT for c in checks.values())
        assert "is UP" in resources["cluster-ssh"]["checks"]["scheduler"]["detail"]
        assert "Active" in resources["pbs-ssh"]["checks"]["scheduler"]["detail"]

        # The same verdicts as metrics (an open /metrics for this test).
        exposed = http.get("/metrics")
        assert exposed.status_code == 200, exposed.text
        samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(exposed.text)
            for sample in family.samples
        }
        for rid, status in expected.items():
            for condition in ("up", "degraded", "down", "unknown"):
                key = (
                    "iri_gateway_resource_condition",
                    (("condition", condition), ("resource", rid)),
                )
                assert samples[key] == (1 if condition == status else 0), (rid, condition)
        root_check = (
            "iri_gateway_resource_check_ok",
            (
                ("check", "file root /nonexistent-iri-health/{account}"),
                ("kind", "file_root"),
                ("resource", "missing-root"),
            ),
        )
        assert samples[root_check] == 0
        login_check = (
            "iri_gateway_resource_check_ok",
            (("check", "login"), ("kind", "login"), ("resource", "cluster-ssh")),
        )
        assert samples[login_check] == 1
