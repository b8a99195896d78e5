"""The filesystem operations that change files, through the real SSH login node, on a real
serve (the set-up of `test_filesystem_ssh`: alice and bob both mapped to the login account,
the profile granting its home `~`).

The writer runs on the login node as that account: what it may not do there, the operating
system refuses too (`chown` to another account is refused before it tries: a 403 naming the
account allowed). The outside folder
here belongs to the login account, so only the gateway's confinement keeps it unchanged.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.test_file_confinement import headers
from tests.api.test_filesystem_write import LONG, snapshot, swapper
from tests.integration import test_filesystem_ssh as ssh_setup
from tests.integration.conftest import ClusterInfo
from tests.integration.test_filesystem_ssh import RESOURCE, Served, run

pytestmark = pytest.mark.integration
V2 = "/api/v2"
served = ssh_setup.served
"""The real serve of `test_filesystem_ssh` (its fixture, used here as it is)."""
http = ssh_setup.http


def post(http: httpx.Client, token: str, operation: str, body: dict[str, Any]) -> httpx.Response:
    return http.post(f"{V2}/filesystem/{operation}/{RESOURCE}", json=body, headers=headers(token))


def finished(
    http: httpx.Client, token: str, task_id: str, deadline: float = 300.0
) -> dict[str, Any]:
    """The task once it is no longer pending or active (failing after `deadline` s)."""
    end = time.monotonic() + deadline
    while True:
        answer = http.get(f"{V2}/task/{task_id}", headers=headers(token))
        assert answer.status_code == 200, answer.text
        task: dict[str, Any] = answer.json()
        if task["status"] not in ("pending", "active"):
            return task
        assert time.monotonic() < end, f"task still {task['status']} after {deadline} s"
        time.sleep(0.05)


def output(
    http: httpx.Client, token: str, operation: str, body: dict[str, Any], status: int = 200
) -> Any:
    answer = post(http, token, operation, body)
    assert answer.status_code == status, (operation, body, answer.text)
    task = finished(http, token, answer.json()["task_id"])
    assert task["status"] == "completed", task
    return task["result"]["output"]


def refused(
    http: httpx.Client, token: str, operation: str, body: dict[str, Any], status: int, field: str
) -> dict[str, Any]:
    """The answer's problem, or (a long operation refused as it ran) its failed task's."""
    answer = post(http, token, operation, body)
    if operation in LONG and answer.status_code == 201:
        task = finished(http, token, answer.json()["task_id"])
        assert task["status"] == "failed", task
        problem: dict[str, Any] = task["result"]["error"]
        assert problem["status"] == status, (operation, body, problem)
        assert field in [p["name"] for p in problem["invalid_params"]], problem
        return problem
    assert answer.status_code == status, (operation, body, answer.text)
    problem = answer.json()
    assert field in [p["name"] for p in problem["invalid_params"]], problem
    return problem


@pytest.fixture
def work(served: Served, cluster: ClusterInfo) -> Iterator[Path]:
    """A fresh folder in the login account's home, owned by it."""
    folder = Path(served.home) / f"iri-write-{uuid.uuid4()}"
    account = pwd.getpwnam(cluster.ssh_user)
    folder.mkdir()
    os.chown(folder, account.pw_uid, account.pw_gid)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def outside(cluster: ClusterInfo) -> Iterator[Path]:
    """A folder outside the home that the login account could change (it owns it)."""
    folder = Path("/tmp") / f"iri-write-outside-{uuid.uuid4()}"
    (folder / "deep").mkdir(parents=True)
    (folder / "secret").write_text("SECRET\n")
    (folder / "deep" / "g").write_text("deep\n")
    account = pwd.getpwnam(cluster.ssh_user)
    for path in (folder, folder / "deep", folder / "secret", folder / "deep" / "g"):
        os.chown(path, account.pw_uid, account.pw_gid)
    before = snapshot(folder)
    yield folder
    try:
        assert snapshot(folder) == before, "the outside changed"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_each_operation_works_as_the_mapped_account(
    http: httpx.Client, served: Served, work: Path, cluster: ClusterInfo
) -> None:
    account = pwd.getpwnam(cluster.ssh_user)
    made = output(http, served.alice, "mkdir", {"path": f"{work}/a/b", "parent": True}, 201)
    assert made["type"] == "directory" and (work / "a/b").is_dir()
    assert (work / "a/b").stat().st_uid == account.pw_uid, "made as the mapped account"
    output(http, served.alice, "symlink", {"path": "b", "link_path": f"{work}/a/ln"}, 201)
    assert os.readlink(work / "a/ln") == "b"
    (work / "a/data.txt").write_text("over ssh\n")
    os.chown(work / "a/data.txt", account.pw_uid, account.pw_gid)
    assert output(http, served.alice, "checksum", {"path": f"{work}/a/data.txt"}) == {
        "algorithm": "SHA-256",
        "checksum": hashlib.sha256(b"over ssh\n").hexdigest(),
    }
    assert output(http, served.alice, "file", {"path": f"{work}/a/data.txt"}) == "ASCII text"
    output(http, served.alice, "cp", {"path": f"{work}/a", "target_path": f"{work}/c"}, 201)
    assert (work / "c/data.txt").read_text() == "over ssh\n" and (work / "c/ln").is_symlink()
    output(http, served.alice, "mv", {"path": f"{work}/c", "target_path": f"{work}/d"}, 201)
    assert not (work / "c").exists() and (work / "d/b").is_dir()
    output(http, served.alice, "chmod", {"path": f"{work}/d/data.txt", "mode": "600"})
    assert (work / "d/data.txt").stat().st_mode & 0o777 == 0o600
    problem = refused(
        http, served.alice, "chown", {"path": f"{work}/d/data.txt", "owner": "root"}, 403, "owner"
    )
    assert f"may only be given to {cluster.ssh_user!r}" in problem["detail"], "refused first"
    assert (work / "d/data.txt").stat().st_uid == account.pw_uid
    output(http, served.alice, "rm", {"path": f"{work}/d", "recursive": True})
    assert not (work / "d").exists() and (work / "a/data.txt").exists()


def test_escapes_change_nothing_outside_over_ssh(
    http: httpx.Client, served: Served, work: Path, outside: Path
) -> None:
    (work / "to-outside").symlink_to(outside)
    (work / "mine.txt").write_text("mine\n")
    bobs = run(http, served.bob, "echo bob > kept.txt")
    bobs_folder = bobs["status"]["meta_data"]["directory"]
    bobs_before = snapshot(Path(bobs_folder))
    for path in (
        f"{outside}/secret",
        f"{work}/to-outside/secret",
        "../../etc/passwd",
        f"{served.home}/../../{outside}/secret",
        f"{bobs_folder}/kept.txt",
        f"{bobs['id']}/kept.txt",
    ):
        for operation, body in (
            ("rm", {"path": path, "recursive": True}),
            ("chmod", {"path": path, "mode": "777"}),
            ("mv", {"path": path, "target_path": f"{work}/stolen"}),
            ("cp", {"path": path, "target_path": f"{work}/stolen"}),
            ("mkdir", {"path": path + "-dir", "parent": True}),
            ("checksum", {"path": path}),
        ):
            assert post(http, served.alice, operation, body).status_code == 404, (operation, path)
    assert snapshot(Path(bobs_folder)) == bobs_before
    refused(
        http, served.alice, "symlink", {"path": str(outside), "link_path": f"{work}/l"}, 403, "path"
    )
    refused(http, served.alice, "rm", {"path": served.home, "recursive": True}, 403, "path")
    refused(
        http,
        served.alice,
        "mv",
        {"path": f"{work}/mine.txt", "target_path": served.home},
        403,
        "target_path",
    )
    refused(http, served.alice, "mkdir", {"path": f"{work}/a\nb"}, 422, "path")
    refused(
        http,
        served.alice,
        "rm",
        {"path": f"{served.home}/iri-gateway-jobs", "recursive": True},
        404,
        "path",
    )
    assert sorted(p.name for p in work.iterdir()) == ["mine.txt", "to-outside"]


def test_a_link_is_followed_through_the_links_on_its_way_over_ssh(
    http: httpx.Client, served: Served, work: Path, outside: Path
) -> None:
    (work / "to-outside").symlink_to(outside)
    (work / "via").symlink_to("to-outside")
    (work / "data").mkdir()
    (work / "current").symlink_to("data")
    (work / "ping").symlink_to("pong")
    (work / "pong").symlink_to("ping")
    for target, said in (
        ("via/secret", "outside"),
        (f"{work}/via", "outside"),
        ("current/../to-outside/deep", "outside"),
        ("ping/x", "loop"),
    ):
        problem = refused(
            http, served.alice, "symlink", {"path": target, "link_path": f"{work}/l"}, 403, "path"
        )
        assert said in problem["detail"], problem
    assert not (work / "l").is_symlink()
    output(http, served.alice, "symlink", {"path": "current/in.txt", "link_path": f"{work}/l"}, 201)
    assert os.readlink(work / "l") == "current/in.txt"


def test_swapping_a_folder_for_a_link_never_changes_outside_over_ssh(
    http: httpx.Client, served: Served, work: Path, outside: Path
) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=swapper, args=(work, outside, stop), daemon=True)
    thread.start()
    sub = f"{work}/sub"
    bodies = [
        ("mkdir", {"path": f"{sub}/new"}),
        ("rm", {"path": f"{sub}/new", "recursive": True}),
        ("chmod", {"path": f"{sub}/secret", "mode": "777"}),
        ("rm", {"path": f"{sub}/deep", "recursive": True}),
        ("mv", {"path": f"{sub}/secret", "target_path": f"{work}/stolen"}),
    ]
    counts: dict[int, int] = {}
    try:
        for _ in range(20):
            for operation, body in bodies:
                status = post(http, served.alice, operation, body).status_code
                assert status < 500, (operation, body, status)
                counts[status] = counts.get(status, 0) + 1
    finally:
        stop.set()
        thread.join(timeout=10)
    assert counts.get(404, 0) > 0, counts
    assert not (work / "stolen").exists()
