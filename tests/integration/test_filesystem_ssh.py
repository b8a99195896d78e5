"""File access through the real SSH login node (issue 11, items 2, 3 and 9), on a real serve.

The gateway reaches `cluster-ssh` through the test cluster's sshd as the login account
alice; the gateway users alice and bob are both mapped to it, so only the gateway keeps their
job folders apart (the operating system would not). The profile grants `~` (the account's
home, found on the login node). Files are read there by the no-follow reader, run with
`python3 -I` as the mapped account.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.test_file_confinement import OPERATIONS, headers, race, swapping_job
from tests.conftest import UNHURRIED
from tests.integration.conftest import ClusterInfo
from tests.support.serve import issue_token, running_serve

pytestmark = pytest.mark.integration
V2 = "/api/v2"
RESOURCE = "cluster-ssh"


@dataclass(frozen=True)
class Served:
    url: str
    alice: str
    bob: str
    home: str


@pytest.fixture(scope="module")
def served(
    cluster: ClusterInfo, cluster_profile: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("ssh-files") / "data"
    tokens = {user: issue_token(data, user, "proj1") for user in ("alice", "bob")}
    home = subprocess.run(
        ["getent", "passwd", cluster.ssh_user], capture_output=True, text=True, check=True
    ).stdout.split(":")[5]
    with running_serve(
        data,
        args=("--profiles", str(cluster_profile)),
        extra_env=UNHURRIED,  # the swap race is not a rate test
        log=data.parent / "server.log",
        stop_timeout=30,
    ) as server:
        yield Served(server.url, tokens["alice"], tokens["bob"], home)


@pytest.fixture
def http(served: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=120) as client:
        yield client


def launch(http: httpx.Client, token: str, spec: dict[str, Any]) -> httpx.Response:
    return http.post(f"{V2}/compute/job/{RESOURCE}", json=spec, headers=headers(token))


def finished(http: httpx.Client, token: str, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:
        job: dict[str, Any] = http.get(
            f"{V2}/compute/status/{RESOURCE}/{job_id}", headers=headers(token)
        ).json()
        if job["status"]["state"] in ("completed", "failed", "canceled"):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.3)


def run(http: httpx.Client, token: str, script: str, **extra: Any) -> dict[str, Any]:
    answer = launch(http, token, {"executable": "/bin/sh", "arguments": ["-c", script], **extra})
    assert answer.status_code == 200, answer.text
    job = finished(http, token, answer.json()["id"])
    assert job["status"]["state"] == "completed", job
    return job


def read(http: httpx.Client, token: str, operation: str, body: dict[str, Any]) -> httpx.Response:
    return http.post(f"{V2}/filesystem/{operation}/{RESOURCE}", json=body, headers=headers(token))


def output_of(http: httpx.Client, token: str, operation: str, body: dict[str, Any]) -> Any:
    answer = read(http, token, operation, body)
    assert answer.status_code == 200, answer.text
    task = http.get(f"{V2}/task/{answer.json()['task_id']}", headers=headers(token))
    return task.json()["result"]["output"]


def test_the_directory_a_client_is_given_works_in_the_filesystem_operations(
    http: httpx.Client, served: Served
) -> None:
    job = run(http, served.alice, "echo hello over ssh")
    meta = job["status"]["meta_data"]
    directory = meta["directory"]
    assert directory == f"{served.home}/iri-gateway-jobs/{job['id']}", "absolute"
    listed = output_of(http, served.alice, "ls", {"path": directory})
    assert "stdout.txt" in [entry["name"] for entry in listed]
    head = output_of(http, served.alice, "head", {"path": f"{directory}/{meta['stdout_path']}"})
    assert head["content"] == "hello over ssh\n"
    relative = output_of(http, served.alice, "tail", {"path": f"{job['id']}/stdout.txt"})
    assert relative["content"] == "hello over ssh\n"


def test_folders_outside_the_granted_home_are_refused_over_ssh(
    http: httpx.Client, served: Served
) -> None:
    bobs = run(http, served.bob, "echo bob")
    bobs_folder = bobs["status"]["meta_data"]["directory"]
    for directory in (
        "/etc",
        "/",
        f"{served.home}/../../etc",
        "../../etc",
        bobs_folder,
        f"{bobs_folder}/sub",
        f"{served.home}/iri-gateway-jobs",
    ):
        for path in ("job", "plan"):
            answer = http.post(
                f"{V2}/compute/{path}/{RESOURCE}",
                headers=headers(served.alice),
                json={"executable": "/bin/true", "directory": directory},
            )
            assert answer.status_code == 422, (directory, answer.text)
            params = {p["name"]: p["reason"] for p in answer.json()["invalid_params"]}
            assert served.home in params["directory"], "the granted home is offered"
    bobs_output = f"{bobs_folder}/{bobs['status']['meta_data']['stdout_path']}"
    for operation in OPERATIONS:
        for path in (
            "/etc/passwd",
            "/etc/shadow",
            "/etc",
            bobs_output,
            bobs_folder,
            f"{bobs['id']}/stdout.txt",
            f"{served.home}/iri-gateway-jobs",
            f"{served.home}/../../etc/passwd",
        ):
            answer = read(http, served.alice, operation, {"path": path})
            assert answer.status_code == 404, (operation, path, answer.text)
            assert "root:" not in answer.text
    assert output_of(http, served.bob, "head", {"path": bobs_output})["content"] == "bob\n"


def test_a_directory_in_the_home_is_used_and_readable_over_ssh(
    http: httpx.Client, served: Served
) -> None:
    name = f"iri-test-runs/{uuid.uuid4()}"
    job = run(http, served.alice, "echo in my home", directory=name)
    meta = job["status"]["meta_data"]
    assert meta["directory"] == f"{served.home}/{name}", "relative to the home, made absolute"
    out = output_of(
        http, served.alice, "view", {"path": f"{meta['directory']}/{meta['stdout_path']}"}
    )
    assert out["content"] == "in my home\n"
    listed = output_of(http, served.alice, "ls", {"path": f"{served.home}/iri-test-runs"})
    assert name.split("/")[1] in [entry["name"] for entry in listed]


def test_swapping_a_folder_for_a_link_never_reads_outside_over_ssh(
    http: httpx.Client, served: Served
) -> None:
    outside = Path("/tmp") / f"iri-race-{uuid.uuid4()}"
    outside.mkdir(mode=0o755)
    outside.chmod(0o755)
    (outside / "f").write_text("SECRET\n")
    (outside / "secret-only").write_text("x")
    job = swapping_job(http, served.alice, outside, RESOURCE)
    deadline = time.monotonic() + 120
    while True:
        got = http.get(
            f"{V2}/compute/status/{RESOURCE}/{job['id']}", headers=headers(served.alice)
        ).json()
        folder = Path(got["status"]["meta_data"]["directory"])
        if (folder / "ready").exists():
            break
        assert got["status"]["state"] in ("queued", "active"), got
        assert time.monotonic() < deadline, "the swapping job did not start"
        time.sleep(0.2)
    try:
        seen, escapes = race(http, served.alice, str(folder), outside, rounds=60, resource=RESOURCE)
        still = http.get(
            f"{V2}/compute/status/{RESOURCE}/{job['id']}", headers=headers(served.alice)
        ).json()
        assert still["status"]["state"] == "active", "the job swapped throughout"
    finally:
        http.delete(f"{V2}/compute/cancel/{RESOURCE}/{job['id']}", headers=headers(served.alice))
    assert escapes == [], f"{len(escapes)} of {5 * 60} reads escaped: {escapes[:3]}"
    assert seen["inside"] > 0 and seen["not found"] > 0, seen


def test_an_empty_path_lists_only_the_callers_job_folders_over_ssh(
    http: httpx.Client, served: Served
) -> None:
    """alice and bob share one login account, and other runs leave job folders in the same
    job root: `ls ""` (the default directory) shows alice only her own."""
    mine = run(http, served.alice, "echo mine")["id"]
    theirs = run(http, served.bob, "echo theirs")["id"]
    listed = [entry["name"] for entry in output_of(http, served.alice, "ls", {"path": ""})]
    assert mine in listed and theirs not in listed
    deep = output_of(http, served.alice, "ls", {"path": "", "recursive": True})
    names = [entry["name"] for entry in deep]
    assert f"{mine}/stdout.txt" in names
    assert not any(theirs in name for name in names)
    assert all(name.split("/")[0] in listed for name in names)
    stat = output_of(http, served.alice, "stat", {"path": ""})
    assert stat["mode"] & 0o040000
    assert read(http, served.alice, "head", {"path": ""}).status_code == 400
    unknown = http.post(
        f"{V2}/filesystem/ls/nowhere", json={"path": 5}, headers=headers(served.alice)
    )
    assert unknown.status_code == 404
