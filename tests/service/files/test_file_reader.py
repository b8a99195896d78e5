"""The file access package alone: the policy (who may use which folders), the no-follow reader
(in-process, and shipped to a real `python3 -I` as it is over SSH), and its refusals.

Real files, links, FIFOs and a real swapping thread; the only stand-in is `ShellLoginNode`,
which runs the reader's command through `sh -c` like sshd does, with a PATH lacking python3
(no login node without python3 can be had here).
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.profile import FileAccess
from iri_gateway.service.files.agents import AgentLimits, Agents
from iri_gateway.service.files.policy import Scope, granted_roots, job_path_problems, safe_component
from iri_gateway.service.files.reads import (
    FileReader,
    ReaderUnavailableError,
    UserFiles,
    decode_part,
)
from iri_gateway.service.files.refusals import FileRefusedError
from iri_gateway.service.files.remote import reader
from iri_gateway.transport.base import CommandResult, Transport
from iri_gateway.transport.local import LocalTransport
from iri_gateway.transport.scripted import Call, ScriptedTransport


def ask(
    base: Path,
    rest: Sequence[str],
    operation: str = "view",
    top: Sequence[str] = (),
    reserved: Sequence[str] = (),
    **arguments: Any,
) -> dict[str, Any]:
    request = {
        "op": operation,
        "base": str(base),
        "top": list(top),
        "rest": list(rest),
        "reserved": list(reserved),
        "offset": 0,
        "size": 1 << 20,
        "limit": 1 << 20,
        "max_entries": 1000,
        "max_dereference": 100,
        **arguments,
    }
    answer: dict[str, Any] = reader.serve(request)
    return answer


def content(answer: dict[str, Any]) -> bytes:
    assert answer["ok"], answer
    return base64.b64decode(answer["result"]["data"])


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/job/{f, sub/g, in-link -> sub/g, abs-link -> root/job/sub, out -> ../outside,
    up -> .., loop -> loop, fifo}; root/outside/secret; root/private/key (reserved)."""
    root = tmp_path / "root"
    job = root / "job"
    (job / "sub").mkdir(parents=True)
    (job / "f").write_text("top file\n")
    (job / "sub" / "g").write_text("inner\n")
    (job / "in-link").symlink_to("sub/g")
    (job / "abs-link").symlink_to(job / "sub")
    (root / "outside").mkdir()
    (root / "outside" / "secret").write_text("SECRET\n")
    (job / "out").symlink_to("../outside")
    (job / "up").symlink_to("..")
    (job / "loop").symlink_to("loop")
    os.mkfifo(job / "fifo")
    (root / "private").mkdir()
    (root / "private" / "key").write_text("KEY\n")
    (job / "to-private").symlink_to(root / "private")
    return root


# ---- the reader ----------------------------------------------------------------------------


def test_links_inside_the_job_folder_are_followed_and_links_out_are_not(tree: Path) -> None:
    job = ["job"]
    assert content(ask(tree, ["sub", "g"], top=job)) == b"inner\n"
    assert content(ask(tree, ["in-link"], top=job)) == b"inner\n"
    assert content(ask(tree, ["abs-link", "g"], top=job)) == b"inner\n"
    for rest in (
        ["out", "secret"],
        ["up", "outside", "secret"],
        ["loop"],
        ["loop", "x"],
        ["missing"],
        ["f", "x"],
        ["to-private", "key"],
    ):
        assert ask(tree, rest, top=job) == {
            "ok": False,
            "error": "not_found",
            "detail": "",
            "field": "",
        }, rest
    # The same tree read from its root: `out` now stays inside, the reserved folder never.
    assert content(ask(tree, ["job", "out", "secret"])) == b"SECRET\n"
    reserved = [str(tree / "private")]
    for rest in (["private", "key"], ["job", "to-private", "key"], ["private"]):
        assert not ask(tree, rest, reserved=reserved)["ok"], rest
    listing = ask(tree, [], "ls", reserved=reserved)["result"]["entries"]
    assert [entry["name"] for entry in listing] == ["job", "outside"]


def test_the_job_folder_itself_is_never_a_link(tree: Path) -> None:
    (tree / "alias").symlink_to(tree / "job")
    assert ask(tree, ["f"], top=["alias"])["error"] == "not_found"
    assert ask(tree, [], "stat", top=["alias"])["error"] == "not_found"
    assert ask(tree, [], "ls", top=["alias"])["error"] == "not_found"


def test_fifos_directories_and_devices_are_refused_without_opening(tree: Path) -> None:
    started = time.monotonic()
    assert ask(tree, ["fifo"], top=["job"])["error"] == "not_regular"
    assert time.monotonic() - started < 5, "a FIFO must not block the reader"
    assert ask(tree, ["sub"], top=["job"])["error"] == "directory"
    assert ask(tree, [], top=["job"])["error"] == "directory"
    assert ask(Path("/dev"), ["null"])["error"] == "not_regular"


def test_stat_and_listing(tree: Path) -> None:
    link = ask(tree, ["in-link"], "stat", top=["job"])["result"]
    assert link["mode"] & 0o170000 == 0o120000
    followed = ask(tree, ["in-link"], "stat", top=["job"], dereference=True)["result"]
    assert followed["size"] == len("inner\n")
    assert ask(tree, ["out"], "stat", top=["job"])["error"] == "not_found", "points out"
    found = ask(tree, [], "ls", top=["job"], recursive=True, dereference=True)["result"]
    kinds = {entry["name"]: (entry["kind"], entry["link"]) for entry in found["entries"]}
    assert kinds["in-link"] == ("file", "sub/g"), "dereferenced: stays inside"
    assert kinds["out"] == ("symlink", "../outside"), "not dereferenced: leaves"
    assert kinds["sub/g"] == ("file", None) and "abs-link/g" not in kinds
    assert not found["truncated"]
    few = ask(tree, [], "ls", top=["job"], max_entries=2)["result"]
    assert few["truncated"] and len(few["entries"]) == 2


def test_head_tail_and_ranges_on_bytes(tree: Path) -> None:
    path = tree / "job" / "lines"
    path.write_bytes(b"".join(b"line%d\n" % i for i in range(1, 6)))
    part = ask(tree, ["lines"], "tail", top=["job"], lines=2)["result"]
    assert base64.b64decode(part["data"]) == b"line4\nline5\n" and part["start"] == 18
    part = ask(tree, ["lines"], "head", top=["job"], lines=0)["result"]
    assert part["data"] == "" and not part["truncated"]
    part = ask(tree, ["lines"], "head", top=["job"], lines=0, limit=4)["result"]
    assert part["data"] == "", "no line asked: nothing, even when the window is cut"
    assert content(ask(tree, ["lines"], "range", top=["job"], tail=6)) == b"line5\n"
    assert content(ask(tree, ["lines"], "range", top=["job"], head=5)) == b"line1"
    assert content(ask(tree, ["lines"], "range", top=["job"], offset=6, length=5)) == b"line2"
    refused = ask(tree, ["lines"], "head", top=["job"], lines=1, skip=True, limit=4)
    assert (refused["error"], refused["field"]) == ("window", "lines")


def test_a_folder_swapped_for_a_link_never_yields_the_outside(tree: Path) -> None:
    """In-process, 20,000 reads while a thread swaps `sub` and a link to `outside`."""
    job = tree / "job"
    (job / "sub").rename(job / "A")
    (job / "A" / "secret").write_text("inside\n")
    (job / "B").symlink_to(tree / "outside")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            os.rename(job / "A", job / "sub")
            os.rename(job / "sub", job / "A")
            os.rename(job / "B", job / "sub")
            os.rename(job / "sub", job / "B")

    swapper = threading.Thread(target=swap)
    swapper.start()
    seen: dict[str, int] = {}
    try:
        for _ in range(20_000):
            answer = ask(tree, ["sub", "secret"], top=["job"])
            key = content(answer).decode() if answer["ok"] else answer["error"]
            seen[key] = seen.get(key, 0) + 1
    finally:
        stop.set()
        swapper.join()
    assert "SECRET\n" not in seen, seen
    assert seen.get("inside\n", 0) > 0, seen


# ---- the reader shipped as it is over SSH ------------------------------------------------


class LoginNodePython(LocalTransport):
    """This machine with a login node's interpreter: `python3` from PATH, not ours."""

    python = "python3"


def agents(transport: Transport, warm: int = 0, where: str = "this machine") -> FileReader:
    return FileReader(Agents(transport, where=where, limits=AgentLimits(), warm=warm))


def test_the_shipped_agent_answers_like_the_reader_itself(tree: Path) -> None:
    """The file agent as a login node runs it (a real `python3 -I -c`, stdlib only,
    self-contained, one request per run) and as the warm local agents run it answer as the
    reader module does."""
    shipped = agents(LoginNodePython())
    warm = agents(LocalTransport(), warm=1)
    for request in (
        {"op": "view", "rest": ["in-link"], "offset": 0, "size": 100},
        {
            "op": "ls",
            "rest": [],
            "recursive": True,
            "dereference": True,
            "hidden": True,
            "max_entries": 100,
            "max_dereference": 10,
        },
        {"op": "stat", "rest": ["out"]},
        {"op": "tail", "rest": ["f"], "lines": 1, "limit": 100},
    ):
        full = {"base": str(tree), "top": ["job"], "reserved": [], **request}
        assert shipped.run(full) == warm.run(full) == reader.serve(full), request
    warm.agents.close()


class ShellLoginNode(LocalTransport):
    """Stand-in for a login node without python3: the command goes through `sh -c`, as
    sshd runs it through the account's shell, with a PATH that has no python3."""

    python = "python3"

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float = 60.0,
        idempotent: bool = False,
    ) -> CommandResult:
        done = subprocess.run(
            ["/bin/sh", "-c", shlex.join(argv)],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={"PATH": "/nonexistent"},
            check=False,
        )
        return CommandResult(tuple(argv), done.returncode, done.stdout, done.stderr)


def chatty_login_node() -> ScriptedTransport:
    """Stand-in for a login node whose login scripts print a banner before any command: each
    command runs on this machine, and its output comes after the banner."""
    machine = LoginNodePython()

    def after_the_banner(call: Call) -> CommandResult:
        done = call.run_on(machine)
        return CommandResult(
            done.argv, done.exit_code, "Welcome to login1!\n\n" + done.stdout, done.stderr
        )

    return ScriptedTransport(name="login1").on(reply=after_the_banner)


def test_a_banner_before_the_answer_is_skipped(tree: Path) -> None:
    chatty = agents(chatty_login_node(), where="login1")
    answer = chatty.run(
        {
            "op": "view",
            "base": str(tree),
            "top": ["job"],
            "rest": ["f"],
            "reserved": [],
            "offset": 0,
            "size": 3,
        }
    )
    assert base64.b64decode(answer["result"]["data"]) == b"top"


def test_a_login_node_without_python3_is_named_as_the_cause(tree: Path) -> None:
    missing = agents(ShellLoginNode(), where="site (alice@login1)")
    with pytest.raises(ReaderUnavailableError) as caught:
        missing.run({"op": "stat", "base": str(tree), "top": [], "rest": [], "reserved": []})
    assert "need python3" in str(caught.value) and "alice@login1" in str(caught.value)
    assert "not found" in str(caught.value), "the shell's own words are kept"


# ---- the policy ------------------------------------------------------------------------------


def test_roots_are_granted_only_with_safe_values() -> None:
    templates = FileAccess(
        roots=["/scratch/{account_initial}/{account}", "/home/{user}", "~/runs", "/shared"]
    ).roots

    def roots(user: str, account: str) -> tuple[str, ...]:
        return granted_roots(templates, user=user, account=account, home=lambda: "/home/acct")

    assert roots("alice", "al") == ("/scratch/a/al", "/home/alice", "/home/acct/runs", "/shared")
    assert roots("..", "al") == ("/scratch/a/al", "/home/acct/runs", "/shared")
    assert roots("alice", "a/b") == ("/home/alice", "/home/acct/runs", "/shared")
    assert roots("alice", ".") == ("/home/alice", "/home/acct/runs", "/shared")
    assert roots("a\nb", "al")[1] == "/home/acct/runs"
    for value in ("", ".", "..", "a/b", "a\0b", "a\x7fb"):
        assert not safe_component(value)


def test_a_jobs_paths_must_lie_in_granted_roots() -> None:
    def problems(document: dict[str, Any], directory: str, named: bool = True) -> list[str]:
        spec = JobSpec.model_validate({"executable": "x", **document})
        return [
            p.field
            for p in job_path_problems(
                spec,
                directory=directory,
                named=named,
                roots=("/home/al", "/scratch/al"),
                reserved=("/home/al/iri-gateway-jobs",),
                resource_id="r",
            )
        ]

    assert problems({"directory": "/home/al/run"}, "/home/al/run") == []
    assert problems({"directory": "/home/alx"}, "/home/alx") == ["directory"]
    assert problems({"directory": "/etc"}, "/etc") == ["directory"]
    assert problems({}, "/home/al/iri-gateway-jobs/other", named=True) == ["directory"]
    assert problems(
        {"stdout_path": "../../../etc/x"}, "/home/al/iri-gateway-jobs/j", named=False
    ) == ["stdout_path"]
    assert (
        problems(
            {"stdout_path": "/scratch/al/out", "stderr_path": "e", "stdin_path": "/home/al/in"},
            "/home/al/iri-gateway-jobs/j",
            named=False,
        )
        == []
    )
    assert problems({"stdin_path": "../k"}, "/home/al/iri-gateway-jobs/j", named=False) == [
        "stdin_path"
    ], "another job's folder"


def test_where_a_path_is_read_from() -> None:
    scope = Scope(
        roots=("/home/al",),
        work_root="/home/al/jobs",
        reserved=("/home/al/jobs",),
        owns_folder=lambda name: name == "mine",
    )
    assert scope.locate("mine/out.txt") == scope.locate("/home/al/jobs/mine/./out.txt")
    anchor = scope.locate("/home/al/jobs/mine/a/../out.txt")
    assert anchor is not None
    assert (anchor.base, anchor.top, anchor.rest) == ("/home/al/jobs", ("mine",), ("out.txt",))
    for refused in (
        "/home/al/jobs/theirs/out.txt",
        "/home/al/jobs",
        "/etc/passwd",
        "mine/../theirs/x",
        "../../etc",
        "/home/alx",
        "/home/al/a\0b",
    ):
        assert scope.locate(refused) is None, refused
    anchor = scope.locate("/home/al//data/../x")
    assert anchor is not None and (anchor.base, anchor.rest) == ("/home/al", ("x",))
    assert anchor.reserved == ("/home/al/jobs",)
    made = scope.locate("/old/root/j1/out", job_folder="/old/root/j1")
    assert made is not None and (made.base, made.top, made.rest) == ("/old/root", ("j1",), ("out",))


def test_refusals_and_decoding_through_user_files(tree: Path) -> None:
    scope = Scope(
        roots=(str(tree),),
        work_root=str(tree / "jobs"),
        reserved=(),
        owns_folder=lambda name: False,
    )
    files = UserFiles(scope, agents(LocalTransport(), warm=1, where="here"))
    (tree / "text").write_bytes(b"\xc3\xa9\xffok")  # "é", a byte that is not UTF-8, "ok"
    part = decode_part(files.request(str(tree / "text"), "view", offset=1, size=10))
    assert (part.text, part.start, part.end) == ("\ufffdok", 2, 5), "cut character dropped"
    with pytest.raises(FileRefusedError) as caught:
        files.request("/etc/passwd", "view", offset=0, size=10)
    assert caught.value.kind == "not_found"


def test_requests_are_json_both_ways(tree: Path) -> None:
    """What goes to a login node: one JSON request on stdin, one JSON answer on stdout."""
    request = {
        "op": "view",
        "base": str(tree),
        "top": ["job"],
        "rest": ["f"],
        "reserved": [],
        "offset": 0,
        "size": 4,
    }
    done = subprocess.run(
        ["python3", "-I", "-c", Path(reader.__file__).read_text()],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert base64.b64decode(json.loads(done.stdout)["result"]["data"]) == b"top "
