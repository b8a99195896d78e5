"""Issue 23 item 2 over SSH: two gateway users mapped to one login account, the job root
`~/<X>/jobs` inside the granted home. `cp` and `compress` of `~/<X>` would hand one user the
other's job output; they are refused (403 naming the job root found inside), nothing written.
A user's own job folder stays reachable through its own path.
"""

from __future__ import annotations

import pwd
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.test_file_confinement import headers
from tests.integration.conftest import ClusterInfo
from tests.integration.test_filesystem_ssh import RESOURCE, Served, run
from tests.support.serve import issue_token, running_serve

pytestmark = pytest.mark.integration
V2 = "/api/v2"


@pytest.fixture(scope="module")
def top() -> str:
    return f"iri-reserved-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def served(
    cluster: ClusterInfo, cluster_profile: Path, top: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """A real serve whose `cluster-ssh` keeps its job folders in `~/<top>/jobs`."""
    folder = tmp_path_factory.mktemp("reserved-ssh")
    text = cluster_profile.read_text()
    start = text.index("- id: cluster-ssh")
    at = text.index("mode: ssh", start)
    text = text[:at] + f'work_root: "~/{top}/jobs"\n      ' + text[at:]
    profile = folder / "cluster.yaml"
    profile.write_text(text)
    data = folder / "data"
    tokens = {user: issue_token(data, user, "proj1") for user in ("alice", "bob")}
    home = pwd.getpwnam(cluster.ssh_user).pw_dir
    with running_serve(data, args=("--profiles", str(profile)), log=folder / "serve.log") as server:
        url = server.url
        try:
            yield Served(url, tokens["alice"], tokens["bob"], home)
        finally:
            for made in Path(home).glob(f"{top}*"):  # what a failing run wrote too
                if made.is_dir() and not made.is_symlink():
                    shutil.rmtree(made, ignore_errors=True)
                else:
                    made.unlink()


@pytest.fixture
def http(served: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=120) as client:
        yield client


def outcome(http: httpx.Client, token: str, operation: str, body: dict[str, Any]) -> dict[str, Any]:
    """The problem of the operation (its answer's, or its failed task's), or its output."""
    answer = http.post(f"{V2}/filesystem/{operation}/{RESOURCE}", json=body, headers=headers(token))
    if answer.status_code >= 400:
        return {"status": answer.status_code, **answer.json()}
    deadline = time.monotonic() + 300
    while True:
        task = http.get(f"{V2}/task/{answer.json()['task_id']}", headers=headers(token)).json()
        if task["status"] not in ("pending", "active"):
            break
        assert time.monotonic() < deadline, task
        time.sleep(0.1)
    if task["status"] == "failed":
        return dict(task["result"]["error"])
    return {"status": answer.status_code, "output": task["result"]["output"]}


def test_one_users_job_output_is_never_copied_to_another(
    http: httpx.Client, served: Served, top: str
) -> None:
    job = run(http, served.alice, "echo alice-secret > secret.txt")
    folder = f"{served.home}/{top}/jobs/{job['id']}"
    assert Path(folder, "secret.txt").read_text() == "alice-secret\n"
    Path(served.home, top, "notes.txt").write_text("shared\n")
    for operation, target in (
        ("cp", f"{served.home}/{top}-copy"),
        ("compress", f"{served.home}/{top}.tgz"),
    ):
        for token in (served.bob, served.alice):
            found = outcome(
                http, token, operation, {"path": f"{served.home}/{top}", "target_path": target}
            )
            assert found["status"] == 403, found
            reasons = {p["name"]: p["reason"] for p in found["invalid_params"]}
            assert f"{served.home}/{top}/jobs" in reasons["path"], reasons
            assert not Path(target).exists(), "nothing written"
    # alice's own job output stays hers, through its own path; bob's answer is 404.
    mine = outcome(
        http,
        served.alice,
        "cp",
        {"path": f"{folder}/secret.txt", "target_path": f"{served.home}/{top}-mine"},
    )
    assert mine["status"] == 201, mine
    assert Path(served.home, f"{top}-mine").read_text() == "alice-secret\n"
    Path(served.home, f"{top}-mine").unlink()
    theirs = outcome(
        http,
        served.bob,
        "cp",
        {"path": f"{folder}/secret.txt", "target_path": f"{served.home}/{top}-theirs"},
    )
    assert theirs["status"] == 404, theirs
