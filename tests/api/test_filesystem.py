"""The filesystem operations (ls, head, tail, view, stat) and the task operations, over HTTP.

Real jobs run on the `local` resource; their output is then read through the official
task-based operations: POST answers a `TaskSubmitResponse`, `getTask` holds the result. Only
paths inside the folders the gateway made for the caller's jobs, and inside the roots the
profile grants the caller, are served; everything else is a 404 that says nothing about
whether the path exists. The profile here is the built-in `local` one granting each user only
`<test folder>/granted/<user>`, so that the rest of the test's folder is outside.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.app import create_app
from iri_gateway.api.filesystem.read_operations import MAX_READ
from iri_gateway.models.job import JobState
from iri_gateway.profiles.loading import builtin_profile
from iri_gateway.service.jobs.engine import JobNotFoundError, OutputUnavailableError
from iri_gateway.service.operations.settings import Settings
from iri_gateway.service.operations.store import JobRecord
from tests.api.conftest import OfficialSchemas

pytestmark = pytest.mark.anyio
V2 = "/api/v2"


def local_profile(folder: Path, roots: str) -> Path:
    """The built-in `local` profile with `files.roots` replaced by `roots` (YAML)."""
    text = builtin_profile("local").read_text()
    assert "roots: [/tmp]" in text
    profile = folder / "local.yaml"
    profile.write_text(text.replace("roots: [/tmp]", f"roots: {roots}"))
    return profile


@pytest.fixture
def app(tmp_path: Path) -> FastAPI:
    """The `local` resource granting each user `<tmp_path>/granted/<user>` only."""
    profile = local_profile(tmp_path, f'["{tmp_path}/granted/{{user}}"]')
    return create_app(Settings(data_dir=tmp_path / "data", profiles=[profile]), run_poller=False)


def granted(tmp_path: Path, user: str = "alice") -> Path:
    folder = tmp_path / "granted" / user
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "proj1"}


async def run_job(
    app: FastAPI, client: httpx.AsyncClient, token: str, script: str, **extra: Any
) -> JobRecord:
    """Submit `sh -c script` on `local` and refresh until it is final."""
    spec = {"executable": "/bin/sh", "arguments": ["-c", script], **extra}
    response = await client.post(f"{V2}/compute/job/local", json=spec, headers=auth(token))
    assert response.status_code == 200, response.text
    job_id = response.json()["id"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        app.state.engine.refresh("local")
        record: JobRecord | None = app.state.engine.store.get(job_id)
        assert record is not None
        if record.state.final:
            assert record.state == JobState.COMPLETED, record
            return record
        await anyio.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish")


async def fs(
    client: httpx.AsyncClient,
    token: str,
    operation: str,
    body: dict[str, Any],
    official: OfficialSchemas | None = None,
) -> httpx.Response:
    """POST a filesystem operation; the raw answer (task submission or problem)."""
    response = await client.post(
        f"{V2}/filesystem/{operation}/local", json=body, headers=auth(token)
    )
    if official is not None and response.status_code == 200:
        official.check("TaskSubmitResponse", response.json())
    return response


async def result(
    client: httpx.AsyncClient,
    token: str,
    operation: str,
    body: dict[str, Any],
    official: OfficialSchemas | None = None,
) -> Any:
    """The `output` of a filesystem operation's task (which must have completed)."""
    response = await fs(client, token, operation, body, official)
    assert response.status_code == 200, response.text
    submitted = response.json()
    assert submitted["task_uri"].endswith(f"{V2}/task/{submitted['task_id']}")
    task = await client.get(f"{V2}/task/{submitted['task_id']}", headers=auth(token))
    assert task.status_code == 200, task.text
    if official is not None:
        official.check("Task", task.json())
    assert task.json()["status"] == "completed"
    assert task.json()["command"]["command"] == operation
    return task.json()["result"]["output"]


def stdout_of(record: JobRecord) -> str:
    return str(Path(record.effective_spec["directory"]) / "stdout.txt")


async def assert_not_found(
    client: httpx.AsyncClient, token: str, operation: str, body: dict[str, Any]
) -> None:
    response = await fs(client, token, operation, body)
    assert response.status_code == 404, (operation, body, response.text)
    assert response.headers["content-type"] == "application/problem+json"
    assert "you may read" in response.json()["detail"]


FIVE_LINES = "for i in 1 2 3 4 5; do echo line$i; done"


async def test_tail_head_view_of_a_job_output(
    app: FastAPI, client: httpx.AsyncClient, token: str, official: OfficialSchemas
) -> None:
    record = await run_job(app, client, token, FIVE_LINES)
    path = stdout_of(record)  # "line1\n" ... "line5\n": 30 bytes
    tail = await result(client, token, "tail", {"path": path, "lines": 2}, official)
    assert tail == {
        "content": "line4\nline5\n",
        "content_type": "lines",
        "start_position": 18,
        "end_position": 30,
        "file_size": 30,
        "truncated": False,
    }
    tail = await result(client, token, "tail", {"path": path, "bytes": 4})
    assert (tail["content"], tail["start_position"]) == ("ne5\n", 26)
    tail = await result(client, token, "tail", {"path": path, "lines": 3, "skipHeading": True})
    assert tail["content"] == "line4\nline5\n"
    tail = await result(client, token, "tail", {"path": path, "bytes": 24, "skipHeading": True})
    assert tail["content"] == "line5\n"
    tail = await result(client, token, "tail", {"path": path})
    assert tail["content"].count("\n") == 5, "10 lines by default: the whole file"

    head = await result(client, token, "head", {"path": path, "lines": 2}, official)
    assert (head["content"], head["end_position"]) == ("line1\nline2\n", 12)
    head = await result(client, token, "head", {"path": path, "bytes": 3})
    assert head["content"] == "lin"
    head = await result(client, token, "head", {"path": path, "lines": 4, "skipTrailing": True})
    assert head["content"] == "line1\n"
    head = await result(client, token, "head", {"path": path, "bytes": 24, "skipTrailing": True})
    assert head["content"] == "line1\n"

    view = await result(client, token, "view", {"path": path, "offset": 6, "size": 5}, official)
    assert (view["content"], view["start_position"], view["end_position"]) == ("line2", 6, 11)
    view = await result(client, token, "view", {"path": path})
    assert view["content"] == "".join(f"line{i}\n" for i in range(1, 6))
    view = await result(client, token, "view", {"path": path, "offset": 100})
    assert view["content"] == "" and view["start_position"] == 30


async def test_relative_paths_are_under_the_job_root(
    app: FastAPI, client: httpx.AsyncClient, token: str
) -> None:
    """A job without `directory` runs in `<id>/` of the job root: `<id>/stdout.txt`."""
    record = await run_job(app, client, token, "echo hello; echo oops >&2")
    assert (await result(client, token, "tail", {"path": f"{record.id}/stdout.txt"}))[
        "content"
    ] == "hello\n"
    assert (await result(client, token, "head", {"path": f"{record.id}/stderr.txt"}))[
        "content"
    ] == "oops\n"
    await assert_not_found(client, token, "tail", {"path": "../../etc/passwd"})
    await assert_not_found(client, token, "tail", {"path": f"{record.id}/../x"})


async def test_stat_and_ls(
    app: FastAPI, client: httpx.AsyncClient, token: str, official: OfficialSchemas
) -> None:
    script = (
        "echo hi; mkdir -p sub/deeper; echo x > sub/f; echo y > sub/deeper/g; "
        "echo h > .hidden; ln -s sub/f inner-link"
    )
    record = await run_job(app, client, token, script)
    directory = record.effective_spec["directory"]
    info = await result(client, token, "stat", {"path": stdout_of(record)}, official)
    assert info["size"] == 3 and info["nlink"] == 1
    assert info["mode"] & 0o170000 == 0o100000, "a regular file"
    link = await result(client, token, "stat", {"path": f"{directory}/inner-link"})
    assert link["mode"] & 0o170000 == 0o120000, "the link itself without dereference"
    followed = await result(
        client, token, "stat", {"path": f"{directory}/inner-link", "dereference": True}
    )
    assert followed["mode"] & 0o170000 == 0o100000 and followed["size"] == 2

    entries = await result(client, token, "ls", {"path": directory}, official)
    by_name = {e["name"]: e for e in entries}
    assert set(by_name) == {"stdout.txt", "stderr.txt", "sub", "inner-link"}
    assert by_name["sub"]["type"] == "directory"
    stdout = by_name["stdout.txt"]
    assert (stdout["type"], stdout["size"], stdout["link_target"]) == ("file", "3", None)
    assert stdout["permissions"][:2] == "rw" and len(stdout["permissions"]) == 9
    assert stdout["last_modified"].endswith("Z") and stdout["user"] and stdout["group"]
    link = by_name["inner-link"]
    assert (link["type"], link["link_target"]) == ("symlink", "sub/f")

    everything = await result(
        client,
        token,
        "ls",
        {
            "path": directory,
            "recursive": True,
            "showHidden": True,
            "dereference": True,
            "numericUid": True,
        },
    )
    names = [e["name"] for e in everything]
    assert names == sorted(names)
    assert {".hidden", "sub/f", "sub/deeper", "sub/deeper/g"} <= set(names)
    dereferenced = next(e for e in everything if e["name"] == "inner-link")
    assert dereferenced["type"] == "file" and dereferenced["link_target"] == "sub/f"
    assert dereferenced["user"].isdigit()

    one = await result(client, token, "ls", {"path": stdout_of(record)})
    assert [e["name"] for e in one] == ["stdout.txt"]
    sub = await result(client, token, "ls", {"path": f"{directory}/sub/deeper/../"})
    assert {e["name"] for e in sub} == {"f", "deeper"}


async def test_paths_outside_the_callers_job_directories_are_not_found(
    app: FastAPI, client: httpx.AsyncClient, token: str, tmp_path: Path
) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("secret\n")
    script = (
        f"echo out; ln -s {outside} leak; ln -s {tmp_path} leakdir; ln -s /etc etc; "
        "mkdir sub; ln -s ../../ up"
    )
    record = await run_job(app, client, token, script)
    directory = record.effective_spec["directory"]
    for operation in ("tail", "head", "view", "stat", "ls"):
        for path in (
            str(outside),  # exists, but outside
            "/etc/passwd",
            f"{directory}/../{record.id}-other",  # `..` leaves the directory
            f"{directory}/../../../secret.txt",
            f"{directory}/sub/../../{record.id}x/stdout.txt",
            f"{directory}/leak",  # symbolic link pointing out
            f"{directory}/leakdir/secret.txt",  # through a link to a folder outside
            f"{directory}/etc/passwd",
            f"{directory}/up",
            f"{directory}/up/secret.txt",
            f"{directory}/missing.txt",  # inside, but missing: the same answer
            "relative/missing",
        ):
            await assert_not_found(client, token, operation, {"path": path})
    # The links are listed as links, never followed out, not even with dereference.
    entries = await result(
        client, token, "ls", {"path": directory, "dereference": True, "recursive": True}
    )
    kinds = {e["name"]: e["type"] for e in entries}
    assert kinds["leak"] == kinds["leakdir"] == kinds["etc"] == "symlink"
    assert not any(name.startswith(("leakdir/", "etc/")) for name in kinds)


async def test_another_users_job_directory_is_not_found(
    app: FastAPI, client: httpx.AsyncClient, token: str
) -> None:
    bob = app.state.tokens.issue("bob", ["proj1"])
    bobs = await run_job(app, client, bob, "echo bob")
    alices = await run_job(app, client, token, "echo alice")
    assert (await result(client, bob, "tail", {"path": stdout_of(bobs)}))["content"] == "bob\n"
    for operation in ("tail", "head", "view", "stat", "ls"):
        await assert_not_found(client, token, operation, {"path": stdout_of(bobs)})
        await assert_not_found(client, token, operation, {"path": bobs.effective_spec["directory"]})
        await assert_not_found(client, token, operation, {"path": f"{bobs.id}/stdout.txt"})
        await assert_not_found(
            client, token, operation, {"path": f"{alices.id}/../{bobs.id}/stdout.txt"}
        )
    tasks = await client.get(f"{V2}/task", headers=auth(token))
    assert tasks.status_code == 200 and tasks.json() == []


async def test_a_link_between_the_callers_own_folders_is_followed(
    app: FastAPI, client: httpx.AsyncClient, token: str
) -> None:
    record = await run_job(app, client, token, "echo data > real.txt; ln -s real.txt alias")
    directory = record.effective_spec["directory"]
    content = await result(client, token, "head", {"path": f"{directory}/alias"})
    assert content["content"] == "data\n"


async def test_explicit_directory_and_output_names(
    app: FastAPI, client: httpx.AsyncClient, token: str, tmp_path: Path
) -> None:
    workdir = granted(tmp_path) / "runs" / "one"
    record = await run_job(app, client, token, "echo mine", directory=str(workdir))
    path = str(workdir / f"iri-{record.id}.out")
    assert (await result(client, token, "tail", {"path": path}))["content"] == "mine\n"
    listed = await result(client, token, "ls", {"path": str(granted(tmp_path) / "runs")})
    assert [e["name"] for e in listed] == ["one"], "the granted root is readable"
    await assert_not_found(client, token, "ls", {"path": str(tmp_path)})
    await assert_not_found(client, token, "ls", {"path": str(tmp_path / "granted")})
    bob = app.state.tokens.issue("bob", ["proj1"])
    await assert_not_found(client, bob, "tail", {"path": path})


async def test_a_job_directory_that_is_a_link(
    app: FastAPI, client: httpx.AsyncClient, token: str, tmp_path: Path
) -> None:
    """A link inside the granted root to a folder inside it is followed; the link itself is
    what `stat` shows without `dereference` (before, the job directory was the boundary and
    its own link was replaced by its target; now the granted root is). A link to a folder
    outside the root is never followed, even as a job's `directory` (the job runs there as
    its account; the gateway reads nothing through it)."""
    root = granted(tmp_path)
    (root / "real").mkdir()
    (root / "alias").symlink_to(root / "real")
    record = await run_job(app, client, token, "echo linked", directory=str(root / "alias"))
    entries = await result(client, token, "ls", {"path": str(root / "alias")})
    assert f"iri-{record.id}.out" in [e["name"] for e in entries]
    info = await result(client, token, "stat", {"path": str(root / "alias")})
    assert info["mode"] & 0o170000 == 0o120000
    info = await result(client, token, "stat", {"path": str(root / "alias"), "dereference": True})
    assert info["mode"] & 0o170000 == 0o040000
    out = await result(client, token, "tail", {"path": f"{root}/alias/iri-{record.id}.out"})
    assert out["content"] == "linked\n"

    (tmp_path / "elsewhere").mkdir()
    (root / "away").symlink_to(tmp_path / "elsewhere")
    away = await run_job(app, client, token, "echo away", directory=str(root / "away"))
    assert (tmp_path / "elsewhere" / f"iri-{away.id}.out").read_text() == "away\n"
    for operation in ("tail", "head", "view", "stat"):
        await assert_not_found(client, token, operation, {"path": f"{root}/away/iri-{away.id}.out"})
    await assert_not_found(client, token, "ls", {"path": f"{root}/away"})


async def test_limits_and_invalid_requests(
    app: FastAPI, client: httpx.AsyncClient, token: str
) -> None:
    # 40,000 lines of 100 bytes: 4 MB.
    record = await run_job(
        app, client, token, "i=0; while [ $i -lt 40000 ]; do printf '%099d\\n' $i; i=$((i+1)); done"
    )
    path = stdout_of(record)
    size = 40_000 * 100
    tail = await result(client, token, "tail", {"path": path, "lines": 2})
    assert tail["content"] == f"{39998:099d}\n{39999:099d}\n" and not tail["truncated"]
    assert tail["start_position"] == size - 200
    many = await result(client, token, "tail", {"path": path, "lines": 30_000})
    assert many["truncated"] and len(many["content"]) <= MAX_READ
    assert many["content"].endswith(f"{39999:099d}\n") and many["end_position"] == size
    assert many["content"].startswith(f"{size // 100 - len(many['content']) // 100:099d}")
    head = await result(client, token, "head", {"path": path, "lines": 20_000})
    assert head["truncated"] and len(head["content"]) == MAX_READ // 100 * 100
    view = await result(client, token, "view", {"path": path})
    assert len(view["content"]) == MAX_READ and view["file_size"] == size
    page = await result(client, token, "view", {"path": path, "offset": size - 100})
    assert page["content"] == f"{39999:099d}\n"
    skipped = await result(client, token, "tail", {"path": path, "lines": 2, "skipHeading": True})
    assert skipped["start_position"] == 200 and skipped["truncated"]
    assert skipped["content"].startswith(f"{2:099d}\n")
    assert len(skipped["content"]) == MAX_READ // 100 * 100, "whole lines only"
    most = await result(client, token, "head", {"path": path, "lines": 2, "skipTrailing": True})
    assert most["truncated"] and len(most["content"]) == MAX_READ // 100 * 100
    rest = await result(
        client, token, "head", {"path": path, "bytes": size - 100, "skipTrailing": True}
    )
    assert rest["content"] == f"{0:099d}\n"

    invalid: list[tuple[str, dict[str, Any], str]] = [
        ("view", {"path": path, "size": MAX_READ + 1}, "size"),
        ("view", {"path": path, "size": 0}, "size"),
        ("view", {"path": path, "offset": -1}, "offset"),
        ("head", {"path": path, "bytes": MAX_READ + 1}, "bytes"),
        ("head", {"path": path, "bytes": 1, "lines": 1}, "bytes"),
        ("head", {"path": path, "lines": -1}, "lines"),
        ("tail", {"path": path, "bytes": MAX_READ + 1}, "bytes"),
        ("tail", {"path": path, "lines": 0}, "lines"),
        ("tail", {"path": path, "lines": 39_999, "skipHeading": True}, "lines"),
        ("head", {"path": path, "lines": 39_999, "skipTrailing": True}, "lines"),
        ("tail", {"path": ""}, "path"),
        ("stat", {"path": "x\u0000y"}, "path"),
        ("ls", {}, "path"),
    ]
    for operation, body, field in invalid:
        response = await fs(client, token, operation, body)
        assert response.status_code == 422, (operation, body, response.text)
        assert field in [p["name"] for p in response.json()["invalid_params"]], response.text

    directory = record.effective_spec["directory"]
    response = await fs(client, token, "head", {"path": directory})
    assert response.status_code == 400 and "directory" in response.json()["detail"]


async def test_output_that_is_not_clean_utf8_is_still_served(
    app: FastAPI, client: httpx.AsyncClient, token: str
) -> None:
    record = await run_job(app, client, token, "printf 'caf\\303\\251 \\377 ok\\n'")
    path = stdout_of(record)
    whole = await result(client, token, "view", {"path": path})
    assert whole["content"].startswith("café ") and whole["content"].endswith(" ok\n")
    cut = await result(client, token, "view", {"path": path, "offset": 4, "size": 2})
    assert cut["content"] in (" ", "\ufffd ")


async def test_tasks_belong_to_their_caller(
    app: FastAPI, client: httpx.AsyncClient, token: str, official: OfficialSchemas
) -> None:
    record = await run_job(app, client, token, "echo one")
    submitted = (await fs(client, token, "tail", {"path": stdout_of(record)})).json()
    task_id = submitted["task_id"]
    listed = await client.get(f"{V2}/task", headers=auth(token))
    assert listed.status_code == 200
    official.check("Task", listed.json(), array=True)
    assert [t["id"] for t in listed.json()] == [task_id]

    bob = app.state.tokens.issue("bob", [])
    assert (await client.get(f"{V2}/task/{task_id}", headers=auth(bob))).status_code == 404
    assert (await client.get(f"{V2}/task", headers=auth(bob))).json() == []
    assert (await client.delete(f"{V2}/task/{task_id}", headers=auth(bob))).status_code == 404

    deleted = await client.delete(f"{V2}/task/{task_id}", headers=auth(token))
    assert deleted.status_code == 200 and task_id in deleted.json()
    assert (await client.get(f"{V2}/task/{task_id}", headers=auth(token))).status_code == 404


async def test_authentication_and_unknown_resource(client: httpx.AsyncClient, token: str) -> None:
    response = await client.post(f"{V2}/filesystem/ls/local", json={"path": "/"})
    assert response.status_code == 401
    assert (await client.get(f"{V2}/task")).status_code == 401
    response = await client.post(
        f"{V2}/filesystem/ls/nowhere", json={"path": "/"}, headers=auth(token)
    )
    assert response.status_code == 404


async def test_a_path_outside_touches_nothing(
    app: FastAPI, client: httpx.AsyncClient, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside what the caller may read, the answer comes before the reader is run (and no
    command either, not even the file agent): the path is placed lexically first."""
    record = await run_job(app, client, token, "true")
    backend = app.state.engine.backends.get(app.state.engine.registry.get("local"), "alice")
    ran: list[Any] = []
    real_run, real_stream, real_agent = (
        backend.transport.run,
        backend.transport.stream,
        backend.agents.run,
    )

    def spy_run(argv: list[str], **kwargs: Any) -> Any:
        ran.append(list(argv))
        return real_run(argv, **kwargs)

    def spy_stream(argv: list[str], **kwargs: Any) -> Any:
        ran.append(list(argv))
        return real_stream(argv, **kwargs)

    def spy_agent(request: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        ran.append(request)
        return real_agent(request, **kwargs)

    monkeypatch.setattr(backend.transport, "run", spy_run)
    monkeypatch.setattr(backend.transport, "stream", spy_stream)
    monkeypatch.setattr(backend.agents, "run", spy_agent)
    for path in ("/etc/passwd", f"{record.id}/../../x", "../x", "/tmp/x"):
        await assert_not_found(client, token, "stat", {"path": path})
    assert ran == []
    await result(client, token, "stat", {"path": f"{record.id}/stdout.txt"})
    requests = [what for what in ran if isinstance(what, dict)]
    assert len(requests) == 1 and requests[0]["top"] == [record.id], "the reader reads inside"


async def test_job_output_is_read_only_where_the_user_may_read(
    app: FastAPI, client: httpx.AsyncClient, token: str
) -> None:
    """A record from before directories were checked (it names /etc) gives its owner no
    read access there: the CLI's and SDK's job output goes through the same reader."""
    engine = app.state.engine
    record = engine.store.create(
        owner="alice",
        resource_id="local",
        spec={"executable": "x", "directory": "/etc"},
        effective_spec={
            "executable": "x",
            "directory": "/etc",
            "stdout_path": "passwd",
            "stderr_path": "/etc/shadow",
        },
        plan={},
        script="",
    )
    for stream in ("stdout", "stderr"):
        with pytest.raises(OutputUnavailableError, match="not where you may read"):
            engine.read_output(owner="alice", job_id=record.id, stream=stream)
    await assert_not_found(client, token, "head", {"path": "/etc/passwd"})
    mine = await run_job(app, client, token, "echo mine")
    assert engine.read_output(owner="alice", job_id=mine.id) == "mine\n"
    with pytest.raises(JobNotFoundError):
        engine.read_output(owner="bob", job_id=mine.id)


async def test_a_relative_directory_is_taken_from_the_home_and_recorded_absolute(
    app: FastAPI,
    client: httpx.AsyncClient,
    token: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A relative `directory` is relative to the account's home (where a login shell
    starts); the job records it absolute, so the path a client is given works as it is.
    (Before, the stored directory stayed relative and the filesystem operations compared it
    against wherever commands happened to run.)"""
    monkeypatch.setenv("HOME", str(tmp_path / "granted"))
    record = await run_job(app, client, token, "echo relative", directory="alice/rel/run")
    directory = record.effective_spec["directory"]
    assert directory == str(tmp_path / "granted" / "alice" / "rel" / "run")
    out = await result(client, token, "head", {"path": f"{directory}/iri-{record.id}.out"})
    assert out["content"] == "relative\n"


async def test_an_empty_path_is_the_default_directory(
    app: FastAPI, client: httpx.AsyncClient, token: str, official: OfficialSchemas
) -> None:
    """The official schema allows `{"path": ""}`: the caller's default directory, the job
    root, whose listing holds only the caller's own job folders (never another user's)."""
    mine = await run_job(app, client, token, "echo mine")
    other_token = app.state.tokens.issue("bob", ["proj1"])
    theirs = await run_job(app, client, other_token, "echo theirs")
    listing = await result(client, token, "ls", {"path": ""}, official)
    assert [entry["name"] for entry in listing] == [mine.id]
    deep = await result(client, token, "ls", {"path": "", "recursive": True}, official)
    names = [entry["name"] for entry in deep]
    assert f"{mine.id}/stdout.txt" in names
    assert not any(theirs.id in name for name in names)
    assert [e["name"] for e in await result(client, other_token, "ls", {"path": ""})] == [theirs.id]
    stat = await result(client, token, "stat", {"path": ""}, official)
    assert stat["mode"] & 0o040000
    for operation in ("head", "view"):
        answer = await fs(client, token, operation, {"path": ""})
        assert answer.status_code == 400, answer.text
        assert answer.json()["invalid_params"] == [{"name": "path", "reason": "is a directory"}]


async def test_an_empty_default_directory_lists_nothing(
    client: httpx.AsyncClient, token: str
) -> None:
    assert await result(client, token, "ls", {"path": ""}) == []


@pytest.mark.parametrize("operation", ["ls", "head", "view", "stat", "tail"])
@pytest.mark.parametrize("body", [{"path": ""}, {"path": 5}, [], {}])
async def test_an_unknown_resource_is_not_found_whatever_the_body(
    client: httpx.AsyncClient, token: str, operation: str, body: Any
) -> None:
    answer = await client.post(
        f"{V2}/filesystem/{operation}/nowhere", json=body, headers=auth(token)
    )
    assert answer.status_code == 404, answer.text
    assert "unknown resource 'nowhere'" in answer.json()["detail"]
