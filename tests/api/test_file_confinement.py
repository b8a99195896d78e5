"""File access never follows a path the user chose (issue 11, items 2, 3 and 7), on a real serve.

A real `iri-gateway serve` (the built-in `local` profile, which grants `/tmp`; the server's
data directory lies in /tmp too, as a careless install's might) with tokens for alice and bob.

- Item 2: a job's `directory` must lie inside a root the profile grants the user and outside
  the gateway's own folders (another user's job folder, the data directory): 422 naming
  `directory`, from launchJob and planJob alike; input and output paths likewise. System
  files and the gateway's own files are 404 through every operation.
- Item 3: a job swapping a sub-folder of its folder with a link to an outside folder, as fast
  as it can, never gets the outside file back through thousands of reads.
- Item 7: `path` of 128 KiB, over 4096 bytes, with NUL or a lone surrogate is a 422 problem
  naming `path` on all five operations, never a 500 or a dropped connection.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import UNHURRIED
from tests.support.serve import issue_token, running_serve

V2 = "/api/v2"
OPERATIONS = ("ls", "head", "tail", "view", "stat")


@dataclass(frozen=True)
class Served:
    url: str
    alice: str
    bob: str
    data_dir: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data_dir = tmp_path_factory.mktemp("confinement-data")
    tokens = {user: issue_token(data_dir, user, "proj1") for user in ("alice", "bob")}
    # Unhurried: the swap race reads as fast as one client can, which is not a rate test.
    with running_serve(data_dir, extra_env=UNHURRIED, log=data_dir / "server.log") as server:
        yield Served(server.url, tokens["alice"], tokens["bob"], data_dir)


@pytest.fixture
def http(served: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=60) as client:
        yield client


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "proj1"}


def launch(http: httpx.Client, token: str, spec: dict[str, Any]) -> httpx.Response:
    return http.post(f"{V2}/compute/job/local", json=spec, headers=headers(token))


def plan(http: httpx.Client, token: str, spec: dict[str, Any]) -> httpx.Response:
    return http.post(f"{V2}/compute/plan/local", json=spec, headers=headers(token))


def finished(http: httpx.Client, token: str, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        job: dict[str, Any] = http.get(
            f"{V2}/compute/status/local/{job_id}", headers=headers(token)
        ).json()
        if job["status"]["state"] in ("completed", "failed", "canceled"):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.1)


def run(http: httpx.Client, token: str, script: str) -> dict[str, Any]:
    answer = launch(http, token, {"executable": "/bin/sh", "arguments": ["-c", script]})
    assert answer.status_code == 200, answer.text
    job = finished(http, token, answer.json()["id"])
    assert job["status"]["state"] == "completed", job
    return job


def read(http: httpx.Client, token: str, operation: str, body: dict[str, Any]) -> httpx.Response:
    return http.post(f"{V2}/filesystem/{operation}/local", json=body, headers=headers(token))


def output_of(http: httpx.Client, token: str, operation: str, body: dict[str, Any]) -> Any:
    answer = read(http, token, operation, body)
    assert answer.status_code == 200, answer.text
    task = http.get(f"{V2}/task/{answer.json()['task_id']}", headers=headers(token))
    return task.json()["result"]["output"]


def assert_refused_directory(answer: httpx.Response, field: str = "directory") -> None:
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    params = {p["name"]: p["reason"] for p in answer.json()["invalid_params"]}
    assert field in params, answer.text
    assert "/tmp" in params[field], "the granted roots are offered"


# ---- item 2: directories ---------------------------------------------------------------------


def test_system_and_gateway_folders_cannot_be_a_jobs_directory(
    http: httpx.Client, served: Served
) -> None:
    alices = run(http, served.alice, "echo mine")
    folder = alices["status"]["meta_data"]["directory"]
    for directory in (
        "/etc",
        "/",
        "/tmp/../etc",
        "/tmp/../../etc",
        "../../etc",
        str(served.data_dir),
        f"{served.data_dir}/work",
        str(Path(folder).parent),
    ):
        spec = {"executable": "/bin/true", "directory": directory}
        assert_refused_directory(launch(http, served.alice, spec))
        assert_refused_directory(plan(http, served.alice, spec))
    for directory in (folder, f"{folder}/sub"):  # another user's job folder
        spec = {"executable": "/bin/true", "directory": directory}
        assert_refused_directory(launch(http, served.bob, spec))
        assert_refused_directory(plan(http, served.bob, spec))
    jobs = http.post(
        f"{V2}/compute/status/local?historical=true", headers=headers(served.bob)
    ).json()
    assert jobs == [], "nothing refused was recorded"


def test_input_and_output_paths_stay_inside(http: httpx.Client, served: Served) -> None:
    written = Path(f"/etc/iri-test-{uuid.uuid4()}")
    for field, value in (
        ("stdout_path", str(written)),
        ("stderr_path", "../../x"),
        ("stdin_path", "/etc/shadow"),
        ("stdout_path", "../other/out"),
    ):
        spec = {"executable": "/bin/true", field: value}
        assert_refused_directory(launch(http, served.alice, spec), field)
        assert_refused_directory(plan(http, served.alice, spec), field)
    time.sleep(1)
    assert not written.exists()


def test_a_directory_in_a_granted_root_is_used_and_readable(
    http: httpx.Client, served: Served, tmp_path: Path
) -> None:
    workdir = tmp_path / "run"
    answer = launch(
        http,
        served.alice,
        {
            "executable": "/bin/sh",
            "arguments": ["-c", "echo ok"],
            "directory": f"{tmp_path}//x/../run/",
        },
    )
    assert answer.status_code == 200, answer.text
    job = finished(http, served.alice, answer.json()["id"])
    assert job["status"]["meta_data"]["directory"] == str(workdir), "recorded normalised"
    out = output_of(
        http,
        served.alice,
        "head",
        {"path": f"{workdir}/{job['status']['meta_data']['stdout_path']}"},
    )
    assert out["content"] == "ok\n"


def test_system_and_gateway_files_are_not_found(http: httpx.Client, served: Served) -> None:
    job = run(http, served.alice, "echo hi")
    folder = job["status"]["meta_data"]["directory"]
    paths = [
        "/etc/shadow",
        "/etc/passwd",
        "/etc",
        "/",
        str(served.data_dir / "tokens.json"),
        str(served.data_dir / "jobs.db"),
        str(served.data_dir),
        f"{folder}/../..",
        f"{job['id']}/../../../tokens.json",
        "../../tokens.json",
        f"/tmp/../{served.data_dir}/tokens.json",
    ]
    for operation in OPERATIONS:
        for path in paths:
            answer = read(http, served.alice, operation, {"path": path})
            assert answer.status_code == 404, (operation, path, answer.text)
            assert "root:" not in answer.text
    listing = output_of(http, served.alice, "ls", {"path": str(served.data_dir.parent)})
    assert served.data_dir.name not in [e["name"] for e in listing], "never listed either"


def test_another_users_job_folder_is_not_found(http: httpx.Client, served: Served) -> None:
    bobs = run(http, served.bob, "echo bob")
    meta = bobs["status"]["meta_data"]
    path = f"{meta['directory']}/{meta['stdout_path']}"
    assert output_of(http, served.bob, "head", {"path": path})["content"] == "bob\n"
    for operation in OPERATIONS:
        for asked in (path, meta["directory"], f"{bobs['id']}/stdout.txt"):
            assert read(http, served.alice, operation, {"path": asked}).status_code == 404


# ---- item 3: the swap race -------------------------------------------------------------------

SWAPPER = """
import os, sys, time
outside = sys.argv[1]
os.mkdir("A")
with open("A/f", "w") as f:
    f.write("inside\\n")
os.symlink(outside, "B")
open("ready", "w").close()
end = time.time() + 600
while time.time() < end and not os.path.exists("stop"):
    os.rename("A", "sub"); os.rename("sub", "A"); os.rename("B", "sub"); os.rename("sub", "B")
"""


def swapping_job(
    http: httpx.Client, token: str, outside: Path, resource: str = "local"
) -> dict[str, Any]:
    """A job whose folder's `sub` is, in turn, a folder holding `f` ('inside') and a link
    to `outside` (holding `f`, the secret); once its `ready` file exists."""
    answer = http.post(
        f"{V2}/compute/job/{resource}",
        headers=headers(token),
        json={
            "executable": "python3",
            "arguments": ["-c", SWAPPER, str(outside)],
            "attributes": {"duration": 900},
        },
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def race(
    http: httpx.Client, token: str, folder: str, outside: Path, rounds: int, resource: str = "local"
) -> tuple[dict[str, int], list[str]]:
    """Read `sub/f` (head, tail, view), stat it and list `sub` `rounds` times each; what came
    back, counted, and every answer that showed the outside."""
    secret_ino = (outside / "f").stat().st_ino
    seen = {"inside": 0, "not found": 0}
    escapes: list[str] = []
    bodies = [
        ("head", {"path": f"{folder}/sub/f", "bytes": 100}),
        ("tail", {"path": f"{folder}/sub/f", "lines": 1}),
        ("view", {"path": f"{folder}/sub/f"}),
        ("stat", {"path": f"{folder}/sub/f", "dereference": True}),
        ("ls", {"path": f"{folder}/sub"}),
    ]
    for _ in range(rounds):
        for operation, body in bodies:
            answer = http.post(
                f"{V2}/filesystem/{operation}/{resource}", json=body, headers=headers(token)
            )
            if answer.status_code == 404:
                seen["not found"] += 1
                continue
            assert answer.status_code == 200, answer.text
            task = http.get(f"{V2}/task/{answer.json()['task_id']}", headers=headers(token))
            output = task.json()["result"]["output"]
            text = json.dumps(output)
            if (
                "SECRET" in text
                or "secret-only" in text
                or (operation == "stat" and output["ino"] == secret_ino)
            ):
                escapes.append(f"{operation}: {text[:200]}")
            else:
                seen["inside"] += 1
    return seen, escapes


def test_swapping_a_folder_for_a_link_never_reads_outside(
    http: httpx.Client, served: Served, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("SECRET\n")
    (outside / "secret-only").write_text("x")
    job = swapping_job(http, served.alice, outside)
    got = http.get(f"{V2}/compute/status/local/{job['id']}", headers=headers(served.alice))
    folder = Path(got.json()["status"]["meta_data"]["directory"])
    deadline = time.monotonic() + 30
    while not (folder / "ready").exists():
        assert time.monotonic() < deadline, "the swapping job did not start"
        time.sleep(0.05)
    try:
        seen, escapes = race(http, served.alice, str(folder), outside, rounds=700)
        still = http.get(
            f"{V2}/compute/status/local/{job['id']}", headers=headers(served.alice)
        ).json()
        assert still["status"]["state"] == "active", "the job swapped throughout"
    finally:
        (folder / "stop").touch()
        http.delete(f"{V2}/compute/cancel/local/{job['id']}", headers=headers(served.alice))
    assert escapes == [], f"{len(escapes)} of {5 * 700} reads escaped: {escapes[:3]}"
    assert seen["inside"] > 0 and seen["not found"] > 0, seen


# ---- item 7: bad paths -----------------------------------------------------------------------


def test_unusable_paths_are_422_naming_path(http: httpx.Client, served: Served) -> None:
    """Inside the caller's own job folder, where the path reaches the file system."""
    folder = run(http, served.alice, "echo hi")["status"]["meta_data"]["directory"]
    long_paths = [f"{folder}/" + "a" * (128 * 1024), "/tmp/" + "b" * 4092, "/tmp/" + "é" * 2046]
    for operation in OPERATIONS:
        bodies = [json.dumps({"path": path}) for path in long_paths]
        inside = json.dumps(f"{folder}/a")[:-1]  # JSON string without its closing quote
        bodies += [
            '{"path": ' + inside + '\\u0000b"}',
            '{"path": ' + inside + '\\ud800b"}',
            '{"path": "\\udfff"}',
        ]
        for body in bodies:
            answer = http.post(
                f"{V2}/filesystem/{operation}/local",
                content=body,
                headers={**headers(served.alice), "Content-Type": "application/json"},
            )
            assert answer.status_code == 422, (operation, body[:60], answer.text[:300])
            assert answer.headers["content-type"] == "application/problem+json"
            assert "path" in [p["name"] for p in answer.json()["invalid_params"]]
    ok = read(http, served.alice, "ls", {"path": "/tmp/" + "c" * 4091})  # 4096 bytes: allowed
    assert ok.status_code == 404
