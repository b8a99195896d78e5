"""The filesystem operations that change files (mkdir, rm, mv, cp, chmod, chown, symlink) and
`file` and `checksum`, over HTTP on the `local` resource, with two users.

The profile grants each user `<test folder>/granted/<user>` only; `<test folder>/outside`
holds files nobody may touch through the gateway. Every escape attempt is checked on the disk:
the outside folder (names, contents, modes, owners, link targets) is the same afterwards. A
thread swapping a folder for a link to the outside while hundreds of operations run never
gets a change made outside.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import pwd
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.app import create_app
from iri_gateway.service.operations.settings import Settings
from tests.api.conftest import OfficialSchemas
from tests.api.test_filesystem import auth, granted, local_profile, run_job

pytestmark = pytest.mark.anyio
V2 = "/api/v2"


@pytest.fixture
def app(tmp_path: Path) -> FastAPI:
    """The `local` resource granting each user `<tmp_path>/granted/<user>` only; `cp` of at
    most 20 files and 1 MiB."""
    profile = local_profile(tmp_path, f'["{tmp_path}/granted/{{user}}"]')
    return create_app(
        Settings(
            data_dir=tmp_path / "data",
            profiles=[profile],
            cp_max_files=20,
            cp_max_bytes=1024 * 1024,
        ),
        run_poller=False,
    )


@pytest.fixture
def bob(app: FastAPI) -> str:
    issued: str = app.state.tokens.issue("bob", ["proj1"])
    return issued


def snapshot(folder: Path) -> dict[str, Any]:
    """Everything about `folder`'s tree that a change would alter."""
    seen: dict[str, Any] = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        info = path.lstat()
        what: Any = (info.st_mode, info.st_uid, info.st_gid, info.st_ino)
        if path.is_symlink():
            what += (os.readlink(path),)
        elif path.is_file():
            what += (path.read_bytes(),)
        seen[str(path)] = what
    return seen


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[Path]:
    """A folder next to the granted ones, with a file, a sub-folder and a link; the test
    fails if anything in it changed."""
    folder = tmp_path / "outside"
    (folder / "deep").mkdir(parents=True)
    (folder / "secret").write_text("SECRET\n")
    (folder / "deep" / "g").write_text("deep\n")
    (folder / "link").symlink_to("secret")
    before = snapshot(folder)
    yield folder
    assert snapshot(folder) == before, "the outside changed"


async def post(
    client: httpx.AsyncClient, token: str, operation: str, body: dict[str, Any]
) -> httpx.Response:
    return await client.post(f"{V2}/filesystem/{operation}/local", json=body, headers=auth(token))


LONG = {"cp", "compress", "extract"}
"""The operations run as background tasks (answered `pending`, finished later)."""


async def finished(
    client: httpx.AsyncClient, token: str, task_id: str, deadline: float = 120.0
) -> dict[str, Any]:
    """The task once it is no longer pending or active (failing after `deadline` s)."""
    end = time.monotonic() + deadline
    while True:
        response = await client.get(f"{V2}/task/{task_id}", headers=auth(token))
        assert response.status_code == 200, response.text
        task: dict[str, Any] = response.json()
        if task["status"] not in ("pending", "active"):
            return task
        assert time.monotonic() < end, f"task still {task['status']} after {deadline} s"
        await asyncio.sleep(0.02)


async def output(
    client: httpx.AsyncClient,
    token: str,
    operation: str,
    body: dict[str, Any],
    status: int = 200,
    official: OfficialSchemas | None = None,
) -> Any:
    """The completed task's `output` (the answer must have `status`)."""
    response = await post(client, token, operation, body)
    assert response.status_code == status, (operation, body, response.text)
    if official is not None:
        official.check("TaskSubmitResponse", response.json())
    task = await finished(client, token, response.json()["task_id"])
    assert task["status"] == "completed", task
    assert task["command"]["command"] == operation
    return task["result"]["output"]


async def refused(
    client: httpx.AsyncClient,
    token: str,
    operation: str,
    body: dict[str, Any],
    status: int,
    field: str,
) -> dict[str, Any]:
    """The problem of a refused operation: its answer, or (a long operation refused as it
    ran) its failed task's `result.error`, which carries the same problem."""
    response = await post(client, token, operation, body)
    if operation in LONG and response.status_code == 201:
        task = await finished(client, token, response.json()["task_id"])
        assert task["status"] == "failed", task
        problem: dict[str, Any] = task["result"]["error"]
        assert problem["status"] == status, (operation, body, problem)
        assert field in [p["name"] for p in problem["invalid_params"]], problem
        return problem
    assert response.status_code == status, (operation, body, response.text)
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert field in [p["name"] for p in problem["invalid_params"]], problem
    return problem


async def test_each_operation_works(
    client: httpx.AsyncClient, token: str, tmp_path: Path, official: OfficialSchemas
) -> None:
    home = granted(tmp_path)
    made = await output(
        client, token, "mkdir", {"path": f"{home}/a/b/c", "parent": True}, 201, official
    )
    assert (home / "a/b/c").is_dir() and made["type"] == "directory"
    assert made["name"] == str(home / "a/b/c")
    await refused(client, token, "mkdir", {"path": f"{home}/a"}, 409, "path")
    await output(client, token, "mkdir", {"path": f"{home}/a", "parent": True}, 201)
    await refused(client, token, "mkdir", {"path": f"{home}/x/y"}, 404, "path")
    (home / "a/data.txt").write_text("hello\n")

    typed = await output(client, token, "file", {"path": f"{home}/a/data.txt"})
    assert typed == "ASCII text"
    assert await output(client, token, "file", {"path": f"{home}/a/b"}) == "directory"
    summed = await output(client, token, "checksum", {"path": f"{home}/a/data.txt"})
    assert summed == {"algorithm": "SHA-256", "checksum": hashlib.sha256(b"hello\n").hexdigest()}
    await refused(client, token, "checksum", {"path": f"{home}/a"}, 400, "path")

    copied = await output(
        client, token, "cp", {"path": f"{home}/a/data.txt", "target_path": f"{home}/copy.txt"}, 201
    )
    assert (home / "copy.txt").read_text() == "hello\n" and copied["type"] == "file"
    await output(client, token, "cp", {"path": f"{home}/a", "target_path": f"{home}/tree"}, 201)
    assert (home / "tree/data.txt").read_text() == "hello\n" and (home / "tree/b/c").is_dir()
    await refused(
        client,
        token,
        "cp",
        {"path": f"{home}/a", "target_path": f"{home}/tree"},
        409,
        "target_path",
    )
    await refused(
        client,
        token,
        "cp",
        {"path": f"{home}/a", "target_path": f"{home}/a/b/a"},
        400,
        "target_path",
    )
    assert not (home / "a/b/a").exists()

    await output(
        client,
        token,
        "mv",
        {"path": f"{home}/copy.txt", "target_path": f"{home}/tree/moved.txt"},
        201,
    )
    assert not (home / "copy.txt").exists()
    assert (home / "tree/moved.txt").read_text() == "hello\n"

    changed = await output(
        client, token, "chmod", {"path": f"{home}/tree/moved.txt", "mode": "640"}
    )
    assert (home / "tree/moved.txt").stat().st_mode & 0o777 == 0o640
    assert changed["permissions"] == "rw-r-----"
    await refused(client, token, "chmod", {"path": f"{home}/tree", "mode": "9"}, 422, "mode")
    me = pwd.getpwuid(os.getuid()).pw_name
    name = (await output(client, token, "chown", {"path": f"{home}/tree/moved.txt", "owner": me}))[
        "user"
    ]
    assert name == me, "a file may be given to the account that runs the jobs"
    await refused(
        client, token, "chown", {"path": f"{home}/tree", "owner": "no-such-user"}, 422, "owner"
    )

    link = await output(
        client, token, "symlink", {"path": "a/data.txt", "link_path": f"{home}/ln"}, 201
    )
    assert os.readlink(home / "ln") == "a/data.txt" and link["type"] == "symlink"
    assert (
        await output(client, token, "file", {"path": f"{home}/ln"})
    ) == "symbolic link to a/data.txt"

    await refused(client, token, "rm", {"path": f"{home}/tree"}, 400, "recursive")
    assert (home / "tree").is_dir()
    await output(client, token, "rm", {"path": f"{home}/ln"})
    assert not (home / "ln").exists() and (home / "a/data.txt").exists(), "link only"
    assert await output(client, token, "rm", {"path": f"{home}/tree", "recursive": True}) == str(
        home / "tree"
    )
    assert not (home / "tree").exists()


async def test_escapes_change_nothing_outside(
    client: httpx.AsyncClient, token: str, tmp_path: Path, outside: Path
) -> None:
    home = granted(tmp_path)
    (home / "to-outside").symlink_to(outside)  # a link pointing out, made by hand
    (home / "mine.txt").write_text("mine\n")
    secret = str(outside / "secret")
    via_dots = f"{home}/../../outside/secret"
    via_link = f"{home}/to-outside/secret"
    for path in (secret, via_dots, via_link, "../../outside/secret", "/etc/passwd"):
        for operation, body in (
            ("rm", {"path": path, "recursive": True}),
            ("chmod", {"path": path, "mode": "777"}),
            ("chown", {"path": path, "owner": "nobody"}),
            ("mv", {"path": path, "target_path": f"{home}/stolen"}),
            ("mv", {"path": f"{home}/mine.txt", "target_path": path}),
            ("cp", {"path": path, "target_path": f"{home}/stolen"}),
            ("cp", {"path": f"{home}/mine.txt", "target_path": path + "-2"}),
            ("mkdir", {"path": path + "-dir", "parent": True}),
            ("symlink", {"path": "mine.txt", "link_path": path + "-ln"}),
            ("checksum", {"path": path}),
            ("file", {"path": path}),
        ):
            problem = await refused(
                client,
                token,
                operation,
                body,
                404,
                "target_path"
                if body.get("target_path", "") in (path, path + "-2")
                else "link_path"
                if "link_path" in body
                else "path",
            )
            assert "SECRET" not in str(problem)
    assert not (home / "stolen").exists()
    assert (home / "mine.txt").read_text() == "mine\n"

    # Links pointing outside are never created (absolute, relative, or through `..`).
    for target in (secret, "../../outside/secret", "/etc", f"{home}/../x"):
        await refused(
            client, token, "symlink", {"path": target, "link_path": f"{home}/bad"}, 403, "path"
        )
        assert not (home / "bad").is_symlink()
    # Followed as the kernel would: a link on the way that leads out (directly, through
    # another link, or through `..` after a link) makes the new link a 403 naming `path`.
    (home / "via").symlink_to("to-outside")  # inside, but leads out in turn
    (home / "deep").symlink_to(outside / "deep")
    for target in (
        "to-outside/secret",
        f"{home}/to-outside",
        "via/secret",
        "via",
        "deep/../secret",
        f"{home}/sub-missing/../via/deep/g",
    ):
        problem = await refused(
            client, token, "symlink", {"path": target, "link_path": f"{home}/escape"}, 403, "path"
        )
        assert "outside" in problem["detail"], problem
        assert not (home / "escape").is_symlink()
    # Nor moved or copied where they would point outside.
    (home / "sub").mkdir()
    (home / "sub/up").symlink_to("../mine.txt")
    await refused(
        client,
        token,
        "mv",
        {"path": f"{home}/sub/up", "target_path": f"{home}/up"},
        403,
        "target_path",
    )
    await refused(
        client,
        token,
        "cp",
        {"path": f"{home}/sub", "target_path": f"{home}/x/y"},
        404,
        "target_path",
    )

    # The root itself is never removed, moved or replaced.
    for operation, body, field in (
        ("rm", {"path": str(home), "recursive": True}, "path"),
        ("rm", {"path": f"{home}/", "recursive": True}, "path"),
        ("mv", {"path": str(home), "target_path": f"{home}/x"}, "path"),
        ("mv", {"path": f"{home}/mine.txt", "target_path": str(home)}, "target_path"),
        ("cp", {"path": f"{home}/mine.txt", "target_path": f"{home}/."}, "target_path"),
    ):
        problem = await refused(client, token, operation, body, 403, field)
        assert "root" in problem["detail"]
    assert (home / "mine.txt").read_text() == "mine\n"

    # Names with NUL or newlines are refused, naming the field.
    for operation, body, field in (
        ("mkdir", {"path": f"{home}/a\nb"}, "path"),
        ("mkdir", {"path": f"{home}/a\0b"}, "path"),
        ("cp", {"path": f"{home}/mine.txt", "target_path": f"{home}/x\ny"}, "target_path"),
        ("symlink", {"path": "mine.txt", "link_path": f"{home}/l\n"}, "link_path"),
        ("symlink", {"path": "mine\n.txt", "link_path": f"{home}/l"}, "path"),
    ):
        await refused(client, token, operation, body, 422, field)
    assert sorted(p.name for p in home.iterdir()) == [
        "deep",
        "mine.txt",
        "sub",
        "to-outside",
        "via",
    ]


async def test_a_link_is_followed_through_the_links_on_its_way(
    client: httpx.AsyncClient, token: str, tmp_path: Path, outside: Path
) -> None:
    home = granted(tmp_path)
    (home / "data" / "run1").mkdir(parents=True)
    (home / "data" / "run1" / "in.txt").write_text("input\n")
    (home / "current").symlink_to("data/run1")  # a link inside, to a folder inside
    (home / "abs").symlink_to(home / "data")
    (home / "sub").mkdir()
    for target, link in (
        ("current/in.txt", "a"),
        ("../current/in.txt", "sub/b"),
        (f"{home}/abs/run1/in.txt", "c"),
        ("current/not-yet", "d"),
        ("current/../data/run1", "e"),
    ):
        made = await output(
            client, token, "symlink", {"path": target, "link_path": f"{home}/{link}"}, 201
        )
        assert made["type"] == "symlink" and os.readlink(home / link) == target
    assert (home / "a").read_text() == "input\n" and (home / "sub/b").read_text() == "input\n"
    # A loop (two links pointing at each other, a link to itself) is refused cleanly.
    (home / "ping").symlink_to("pong")
    (home / "pong").symlink_to("ping")
    (home / "self").symlink_to("self")
    for target in ("ping", "ping/x", "self/x"):
        problem = await refused(
            client, token, "symlink", {"path": target, "link_path": f"{home}/loop"}, 403, "path"
        )
        assert "loop" in problem["detail"], problem
    assert not (home / "loop").is_symlink()


async def test_another_users_folders_are_not_found(
    app: FastAPI, client: httpx.AsyncClient, token: str, bob: str, tmp_path: Path
) -> None:
    bobs = await run_job(app, client, bob, "echo bob > kept.txt")
    folder = Path(bobs.effective_spec["directory"])
    bob_home = granted(tmp_path, "bob")
    (bob_home / "b.txt").write_text("bob\n")
    before = {folder: snapshot(folder), bob_home: snapshot(bob_home)}
    home = granted(tmp_path)
    for path in (
        f"{folder}/kept.txt",
        str(folder),
        f"{bobs.id}/kept.txt",
        f"{bob_home}/b.txt",
        str(bob_home),
    ):
        for operation, body in (
            ("rm", {"path": path, "recursive": True}),
            ("chmod", {"path": path, "mode": "777"}),
            ("mv", {"path": path, "target_path": f"{home}/got"}),
            ("cp", {"path": path, "target_path": f"{home}/got"}),
            ("mkdir", {"path": f"{path}/new"}),
            ("checksum", {"path": path}),
        ):
            assert (await post(client, token, operation, body)).status_code == 404
    assert {k: snapshot(k) for k in before} == before
    assert not (home / "got").exists()
    # Bob himself may change his job folder's content (not the folder itself).
    await output(client, bob, "mkdir", {"path": f"{folder}/new"}, 201)
    await refused(client, bob, "rm", {"path": str(folder), "recursive": True}, 403, "path")
    assert (folder / "new").is_dir()


async def test_cp_is_bounded(client: httpx.AsyncClient, token: str, tmp_path: Path) -> None:
    home = granted(tmp_path)
    (home / "many").mkdir()
    for index in range(25):
        (home / "many" / f"f{index}").write_text("x")
    problem = await refused(
        client, token, "cp", {"path": f"{home}/many", "target_path": f"{home}/copy"}, 413, "path"
    )
    assert "20" in problem["detail"]
    assert not (home / "copy").exists(), "counted before anything is copied"
    (home / "big").write_bytes(b"x" * (1024 * 1024 + 1))
    await refused(
        client, token, "cp", {"path": f"{home}/big", "target_path": f"{home}/b2"}, 413, "path"
    )
    assert not (home / "b2").exists()


def swapper(folder: Path, outside: Path, stop: threading.Event) -> None:
    """`folder/sub` is, in turn, a real folder (with `f`) and a link to `outside`."""
    real, link = folder / "real", folder / "link"
    real.mkdir()
    (real / "f").write_text("inside\n")
    link.symlink_to(outside)
    sub = folder / "sub"
    while not stop.is_set():
        os.rename(real, sub)
        os.rename(sub, real)
        os.rename(link, sub)
        os.rename(sub, link)


async def test_swapping_a_folder_for_a_link_never_changes_outside(
    client: httpx.AsyncClient, token: str, tmp_path: Path, outside: Path
) -> None:
    home = granted(tmp_path)
    (home / "mine.txt").write_text("mine\n")
    stop = threading.Event()
    thread = threading.Thread(target=swapper, args=(home, outside, stop), daemon=True)
    thread.start()
    sub = f"{home}/sub"
    bodies = [
        ("mkdir", {"path": f"{sub}/new"}),
        ("rm", {"path": f"{sub}/new", "recursive": True}),
        ("chmod", {"path": f"{sub}/secret", "mode": "777"}),
        ("chmod", {"path": f"{sub}/f", "mode": "600"}),
        ("chown", {"path": f"{sub}/secret", "owner": "nobody"}),
        ("rm", {"path": f"{sub}/secret"}),
        ("rm", {"path": f"{sub}/deep", "recursive": True}),
        ("mv", {"path": f"{sub}/secret", "target_path": f"{home}/stolen"}),
        ("cp", {"path": f"{home}/mine.txt", "target_path": f"{sub}/planted"}),
        ("symlink", {"path": "../mine.txt", "link_path": f"{sub}/planted-link"}),
        ("rm", {"path": f"{sub}/planted"}),
        ("rm", {"path": f"{sub}/planted-link"}),
    ]
    counts: dict[int, int] = {}
    try:
        for _ in range(25):
            for operation, body in bodies:
                status = (await post(client, token, operation, body)).status_code
                assert status < 500, (operation, body, status)
                counts[status] = counts.get(status, 0) + 1
    finally:
        stop.set()
        thread.join(timeout=10)
    assert sum(counts.values()) == 300
    assert counts.get(200, 0) + counts.get(201, 0) > 0, counts
    assert counts.get(404, 0) > 0, counts
    assert not (home / "stolen").exists()
