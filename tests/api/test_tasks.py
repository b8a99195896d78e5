"""The long filesystem operations (`cp`, `compress`, `extract`) as background tasks kept in the
store, on real `iri-gateway serve` processes on the `local` resource.

A big copy and a big extract are seen `active` with growing progress, then `completed`; a
task refused as it runs carries the problem the request would have had; another user's task
is not found, to read or to delete; deleting a running task cancels it and leaves no partial
target; a task is read through another replica on the same PostgreSQL; a serve killed with
`kill -9` while a task runs leaves it `failed` (at the restart, or by the other replica),
never `active` for ever.
"""

from __future__ import annotations

import os
import signal
import tarfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from iri_gateway.service.operations.schema import ReplicaRow
from iri_gateway.service.operations.store import JobStore
from iri_gateway.service.tasks.records import TASKS_PER_USER, TaskStore
from tests.api.task_site import Site, gateway
from tests.api.test_filesystem import auth

V2 = "/api/v2"
FOLDERS, FILES, SIZE = 60, 50, 32 * 1024
"""The big tree: 3000 files of 32 KiB (about 94 MiB) in 60 folders."""


def big_tree(folder: Path) -> Path:
    for index in range(FOLDERS):
        inner = folder / f"d{index:03}"
        inner.mkdir(parents=True)
        for number in range(FILES):
            (inner / f"f{number:03}").write_bytes(bytes([index % 256]) * SIZE)
    return folder


def start(http: httpx.Client, user: str, operation: str, body: dict[str, Any]) -> str:
    answer = http.post(f"{V2}/filesystem/{operation}/local", json=body, headers=auth(user))
    assert answer.status_code == 201, answer.text
    task_id: str = answer.json()["task_id"]
    return task_id


def read(http: httpx.Client, user: str, task_id: str) -> dict[str, Any]:
    answer = http.get(f"{V2}/task/{task_id}", headers=auth(user))
    assert answer.status_code == 200, answer.text
    task: dict[str, Any] = answer.json()
    return task


def watch(
    http: httpx.Client, user: str, task_id: str, until: Any = None, deadline: float = 300
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The progress seen while the task was active, and the task when `until(task)` (by
    default: no longer pending or active). Read every 20 ms, within the user's read rate
    (200 a second by default: a loop without a pause is refused with 429 within seconds)."""
    until = until or (lambda task: task["status"] not in ("pending", "active"))
    seen: list[dict[str, Any]] = []
    end = time.monotonic() + deadline
    while True:
        task = read(http, user, task_id)
        progress = (task["result"] or {}).get("progress")
        if task["status"] == "active" and progress and (not seen or seen[-1] != progress):
            seen.append(progress)
        if until(task):
            return seen, task
        assert time.monotonic() < end, f"task still {task['status']} after {deadline} s"
        time.sleep(0.02)


def assert_grows(seen: list[dict[str, Any]], entries: int, nbytes: int) -> None:
    assert len(seen) >= 2, f"progress seen only {seen}: the work was too quick to watch"
    done = [reading["bytes_done"] for reading in seen]
    assert done == sorted(done) and done[0] < done[-1], seen
    assert all(r["entries_total"] == entries and r["bytes_total"] == nbytes for r in seen)
    assert seen[-1]["bytes_done"] <= nbytes


def same_tree(one: Path, other: Path) -> bool:
    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    return files(one) == files(other)


def test_a_big_copy_and_extract_report_growing_progress_then_complete(
    site: Site, tmp_path: Path
) -> None:
    source = big_tree(site.home / "big")
    archive = site.home / "big.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(source, arcname="big")
    with (
        gateway(site.profile, tmp_path / "data", site.tokens) as served,
        httpx.Client(base_url=served.url, timeout=60) as http,
    ):
        task_id = start(
            http, site.alice, "cp", {"path": str(source), "target_path": f"{site.home}/copy"}
        )
        seen, task = watch(http, site.alice, task_id)
        assert task["status"] == "completed", task
        assert task["result"]["output"]["name"] == f"{site.home}/copy"
        assert_grows(seen, 1 + FOLDERS * (1 + FILES), FOLDERS * FILES * SIZE)
        assert same_tree(source, site.home / "copy")

        task_id = start(
            http,
            site.alice,
            "extract",
            {
                "path": str(archive),
                "target_path": f"{site.home}/out",
                "compression": "urn:doe-iri:compression:none",
            },
        )
        seen, task = watch(http, site.alice, task_id)
        assert task["status"] == "completed", task
        assert_grows(seen, 1 + FOLDERS * (1 + FILES), FOLDERS * FILES * SIZE)
        assert same_tree(source, site.home / "out" / "big")

        # compress counts what it will store first: totals from its first progress on,
        # `match_pattern` applied (folders always stored, files matching `f0[0-2]`: 30 each,
        # enough bytes that the packing is seen twice: 10 each was once packed between two
        # reads 20 ms apart).
        task_id = start(
            http,
            site.alice,
            "compress",
            {
                "path": str(source),
                "target_path": f"{site.home}/some.tar",
                "compression": "urn:doe-iri:compression:none",
                "match_pattern": "/f0[0-2]",
            },
        )
        seen, task = watch(http, site.alice, task_id)
        assert task["status"] == "completed", task
        assert_grows(seen, 1 + FOLDERS * (1 + 30), FOLDERS * 30 * SIZE)
        with tarfile.open(site.home / "some.tar") as tar:
            assert len(tar.getmembers()) == 1 + FOLDERS * (1 + 30)


def test_refusals_before_queueing_are_immediate_and_later_ones_are_the_tasks_error(
    site: Site, tmp_path: Path
) -> None:
    (site.home / "tree").mkdir()
    (site.home / "tree" / "a").write_text("a")
    (site.home / "tree" / "out").symlink_to("/etc/passwd")
    bad = site.home / "bad.tar"
    with tarfile.open(bad, "w") as tar:
        tar.addfile(tarfile.TarInfo("ok"))
        tar.addfile(tarfile.TarInfo("../escape"))
    with (
        gateway(site.profile, tmp_path / "data", site.tokens) as served,
        httpx.Client(base_url=served.url, timeout=60) as http,
    ):
        missing = http.post(
            f"{V2}/filesystem/cp/local",
            headers=auth(site.alice),
            json={"path": f"{site.home}/nothing", "target_path": f"{site.home}/x"},
        )
        assert missing.status_code == 404, missing.text
        taken = http.post(
            f"{V2}/filesystem/cp/local",
            headers=auth(site.alice),
            json={"path": f"{site.home}/tree", "target_path": str(bad)},
        )
        assert taken.status_code == 409, taken.text
        assert taken.json()["invalid_params"][0]["name"] == "target_path"
        unknown = http.post(
            f"{V2}/filesystem/extract/nowhere",
            headers=auth(site.alice),
            json={"path": str(bad), "target_path": f"{site.home}/x"},
        )
        assert unknown.status_code == 404, unknown.text

        task = watch(
            http,
            site.alice,
            start(
                http,
                site.alice,
                "cp",
                {"path": f"{site.home}/tree", "target_path": f"{site.home}/copy"},
            ),
        )[1]
        assert task["status"] == "failed", task
        error = task["result"]["error"]
        assert error["status"] == 403 and error["title"] == "Forbidden", error
        assert "'out'" in error["detail"] and error["invalid_params"][0]["name"] == "path"
        assert not (site.home / "copy").exists(), "a failed copy leaves nothing"

        task = watch(
            http,
            site.alice,
            start(
                http,
                site.alice,
                "extract",
                {
                    "path": str(bad),
                    "target_path": f"{site.home}/out",
                    "compression": "urn:doe-iri:compression:none",
                },
            ),
        )[1]
        assert task["status"] == "failed", task
        assert task["result"]["error"]["status"] == 400
        assert "'../escape'" in task["result"]["error"]["detail"]
        assert sorted(p.name for p in site.home.iterdir()) == ["bad.tar", "tree"]


def test_another_users_task_is_not_found_to_read_or_delete(site: Site, tmp_path: Path) -> None:
    big_tree(site.home / "big")
    with (
        gateway(site.profile, tmp_path / "data", site.tokens) as served,
        httpx.Client(base_url=served.url, timeout=60) as http,
    ):
        task_id = start(
            http, site.alice, "cp", {"path": f"{site.home}/big", "target_path": f"{site.home}/copy"}
        )
        for answer in (
            http.get(f"{V2}/task/{task_id}", headers=auth(site.bob)),
            http.delete(f"{V2}/task/{task_id}", headers=auth(site.bob)),
        ):
            assert answer.status_code == 404, answer.text
        assert task_id not in [
            t["id"] for t in http.get(f"{V2}/task", headers=auth(site.bob)).json()
        ]
        task = watch(http, site.alice, task_id)[1]
        assert task["status"] == "completed", "bob's delete did not cancel alice's task"
        assert http.delete(f"{V2}/task/{task_id}", headers=auth(site.bob)).status_code == 404
        assert http.get(f"{V2}/task/{task_id}", headers=auth(site.alice)).status_code == 200
        assert http.delete(f"{V2}/task/{task_id}", headers=auth(site.alice)).status_code == 200
        assert http.get(f"{V2}/task/{task_id}", headers=auth(site.alice)).status_code == 404


@pytest.mark.parametrize("operation", ["cp", "compress", "extract"])
def test_deleting_a_running_task_cancels_it_and_leaves_no_partial_target(
    site: Site, tmp_path: Path, operation: str
) -> None:
    body = long_operation(site, operation)
    before = sorted(p.name for p in site.home.iterdir())
    with (
        gateway(site.profile, tmp_path / "data", site.tokens) as served,
        httpx.Client(base_url=served.url, timeout=60) as http,
    ):
        task_id = start(http, site.alice, operation, body)
        watch(
            http,
            site.alice,
            task_id,
            until=lambda task: (
                task["status"] == "active" and task["result"] and "progress" in task["result"]
            ),
        )
        answer = http.delete(f"{V2}/task/{task_id}", headers=auth(site.alice))
        assert answer.status_code == 200 and "canceled" in answer.json(), answer.text
        task = watch(
            http, site.alice, task_id, until=lambda task: task["result"].get("stopped") is True
        )[1]
        assert task["status"] == "canceled", task
        assert sorted(p.name for p in site.home.iterdir()) == before, "nothing partial left"


def test_a_users_quick_operations_keep_their_unfinished_tasks_and_one_more_is_a_429(
    site: Site, tmp_path: Path
) -> None:
    """32 unfinished tasks of alice's (made pending in the serve's store, as a replica that
    runs them would): 40 quick operations of hers drop none of them; a 33rd long operation
    is a 429 naming the bound (with Retry-After); bob is not bound by alice's; a cancel
    makes room."""
    (site.home / "f").write_text("f")
    data = tmp_path / "data"
    with (
        gateway(site.profile, data, site.tokens) as served,
        httpx.Client(base_url=served.url, timeout=60) as http,
    ):
        store = JobStore(f"sqlite:///{data / 'jobs.db'}")
        with store.writing() as session:
            (replica_id,) = session.scalars(select(ReplicaRow.id)).all()
        tasks = TaskStore(store)
        waiting = [
            tasks.create(
                "alice",
                {"router": "filesystem", "command": "cp", "args": {}},
                replica_id=replica_id,
            ).id
            for _ in range(TASKS_PER_USER)
        ]
        for index in range(40):
            made = http.post(
                f"{V2}/filesystem/mkdir/local",
                headers=auth(site.alice),
                json={"path": f"{site.home}/d{index}"},
            )
            assert made.status_code == 201, made.text
        listed = http.get(f"{V2}/task", headers=auth(site.alice)).json()
        assert [t["id"] for t in listed if t["status"] == "pending"] == waiting
        body = {"path": f"{site.home}/f", "target_path": f"{site.home}/g"}
        refused = http.post(f"{V2}/filesystem/cp/local", headers=auth(site.alice), json=body)
        assert refused.status_code == 429, refused.text
        assert refused.headers["Retry-After"] == "5"
        assert f"{TASKS_PER_USER} unfinished file tasks" in refused.json()["detail"]
        assert not (site.home / "g").exists()
        bob = site.home.parent / "bob"
        (bob / "b").write_text("b")
        start(http, site.bob, "cp", {"path": f"{bob}/b", "target_path": f"{bob}/c"})
        assert http.delete(f"{V2}/task/{waiting[0]}", headers=auth(site.alice)).status_code == 200
        task_id = start(http, site.alice, "cp", body)
        assert watch(http, site.alice, task_id)[1]["status"] == "completed"
        assert (site.home / "g").read_text() == "f"


def long_operation(site: Site, operation: str) -> dict[str, str]:
    """The body of a `cp`, `compress` or `extract` of the big tree into `<home>/made`."""
    source = big_tree(site.home / "big")
    if operation == "extract":
        with tarfile.open(site.home / "big.tar", "w") as tar:
            tar.add(source, arcname="big")
        source = site.home / "big.tar"
    body = {"path": str(source), "target_path": f"{site.home}/made"}
    if operation != "cp":
        body["compression"] = "urn:doe-iri:compression:none"
    return body


@pytest.mark.parametrize("operation", ["cp", "compress", "extract"])
def test_kill_9_during_a_task_leaves_it_failed_and_nothing_at_the_target(
    site: Site, tmp_path: Path, operation: str
) -> None:
    """The half-made result of a serve killed with kill -9 is only ever under a hidden
    `.iri-work-` name, never at the target's name (a user never takes half a copy for a
    copy), and usually not even that (the file agent sees its input end and removes what its
    worker wrote); the task is failed at the restart, and the next such operation into the
    folder removes any leftover (its process is gone) and does the work."""
    body = long_operation(site, operation)
    before = sorted(p.name for p in site.home.iterdir())
    data = tmp_path / "data"
    with (
        gateway(site.profile, data, site.tokens) as served,
        httpx.Client(base_url=served.url, timeout=60) as http,
    ):
        task_id = start(http, site.alice, operation, body)
        watch(
            http,
            site.alice,
            task_id,
            until=lambda task: (
                task["status"] == "active" and task["result"] and "progress" in task["result"]
            ),
        )
        os.kill(served.process.pid, signal.SIGKILL)
        served.process.wait(timeout=30)
    left = sorted(set(p.name for p in site.home.iterdir()) - set(before))
    assert "made" not in left
    assert len(left) <= 1 and all(name.startswith(".iri-work-") for name in left), left
    with (
        gateway(site.profile, data, site.tokens) as served,
        httpx.Client(base_url=served.url, timeout=60) as http,
    ):
        task = read(http, site.alice, task_id)
        assert task["status"] == "failed", task
        assert "stopped or died" in task["result"]["error"]["detail"]
        assert ".iri-work-" in task["result"]["error"]["detail"]
        again = start(http, site.alice, operation, body)
        assert watch(http, site.alice, again)[1]["status"] == "completed"
    assert sorted(p.name for p in site.home.iterdir()) == sorted([*before, "made"])


def test_tasks_are_shared_by_replicas_and_a_dead_replicas_task_fails(
    site: Site, tmp_path: Path, postgres_url: str
) -> None:
    big_tree(site.home / "big")
    (site.home / "small").write_text("small")
    env = {"IRI_GATEWAY_DATABASE_URL": postgres_url}
    with ExitStack() as stack:
        a = stack.enter_context(gateway(site.profile, tmp_path / "a", site.tokens, **env))
        b = stack.enter_context(gateway(site.profile, tmp_path / "b", site.tokens, **env))
        via_a = stack.enter_context(httpx.Client(base_url=a.url, timeout=60))
        via_b = stack.enter_context(httpx.Client(base_url=b.url, timeout=60))
        small = start(
            via_a,
            site.alice,
            "cp",
            {"path": f"{site.home}/small", "target_path": f"{site.home}/small2"},
        )
        task = watch(via_b, site.alice, small)[1]
        assert task["status"] == "completed", task
        assert via_b.get(f"{V2}/task/{small}", headers=auth(site.bob)).status_code == 404

        big = start(
            via_a,
            site.alice,
            "cp",
            {"path": f"{site.home}/big", "target_path": f"{site.home}/copy"},
        )
        watch(via_b, site.alice, big, until=lambda task: task["status"] == "active")
        os.kill(a.process.pid, signal.SIGKILL)
        a.process.wait(timeout=30)
        task = watch(via_b, site.alice, big, deadline=60)[1]
        assert task["status"] == "failed", task
        assert "stopped or died" in task["result"]["error"]["detail"]
