"""Issue 23 (items 1, 2, 3, 5, 6): hostile users against the filesystem operations of a real
`iri-gateway serve` on the built-in `local` profile (which grants `/tmp`), run as root.

The server's folders lie where a careless install puts them: `<top>/srv/data` is the data
directory and `<top>/srv/db/jobs.db` the SQLite store, `<top>/srv/keys/tokens.json` the
tokens file, all under `/tmp`, which every user may use.

- Tar headers are bounded before `tarfile` parses them: a PAX number of 40,569 digits and a
  PAX header of about 1 MiB are refused (400 naming the bound) while `/health` answers within
  200 ms throughout, and the server's memory does not grow.
- The gateway's own files and folders are refused inside any tree (`cp`, `compress` of the
  folder holding them: 403 naming the one found, nothing written), and by identity (a hard
  link to the store's `-wal` is not served), and folders holding them keep their mode and
  owner; the tokens file outside the data directory is not removed.
- No privilege change: setuid, setgid and sticky bits are refused (422 naming `mode`), `chown`
  to another account or group too (403 naming the owner or group).
- Deep trees: `rm -r` of 1,100 nested folders and an extract of a 10,500-deep member are
  answered (never a 500); the folders member names imply count against the entry limit.
- An archive made with `tar -C d -czf x.tgz .` is extracted.
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.serve import clean_env, issue_token, running_serve

V2 = "/api/v2"


@dataclass(frozen=True)
class Served:
    url: str
    alice: str
    bob: str
    top: Path
    pid: int


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    top = Path("/tmp") / f"hostile-{uuid.uuid4().hex[:8]}"
    data, db, keys = top / "srv" / "data", top / "srv" / "db", top / "srv" / "keys"
    for folder in (data, db, keys):
        folder.mkdir(parents=True)
    env = {
        **clean_env(),
        "IRI_GATEWAY_DATABASE_URL": f"sqlite:///{db}/jobs.db",
        "IRI_GATEWAY_TOKENS_FILE": str(keys / "tokens.json"),
    }
    tokens = {user: issue_token(data, user, "proj1", env) for user in ("alice", "bob")}
    with running_serve(data, base_env=env, log=top / "serve.log") as server:
        url = server.url
        try:
            yield Served(url, tokens["alice"], tokens["bob"], top, server.process.pid)
        finally:  # `rm` removes deep trees too (shutil.rmtree recurses)
            subprocess.run(["rm", "-rf", str(top)], check=False, timeout=300)


@pytest.fixture
def http(served: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=120) as client:
        yield client


@pytest.fixture
def home(served: Served) -> Path:
    """A fresh folder of alice's under the granted /tmp."""
    folder = served.top / "alice" / uuid.uuid4().hex[:8]
    folder.mkdir(parents=True)
    return folder


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "proj1"}


def call(http: httpx.Client, token: str, operation: str, body: dict[str, Any]) -> dict[str, Any]:
    """The operation's outcome as `{"status": HTTP status, "problem" or "output": ...}`;
    a long operation's task is followed to its end (its failure carries the problem)."""
    answer = http.post(f"{V2}/filesystem/{operation}/local", json=body, headers=headers(token))
    if answer.status_code >= 400:
        return {"status": answer.status_code, "problem": answer.json()}
    task_id = answer.json()["task_id"]
    deadline = time.monotonic() + 300
    while True:
        task = http.get(f"{V2}/task/{task_id}", headers=headers(token)).json()
        if task["status"] not in ("pending", "active"):
            break
        assert time.monotonic() < deadline, task
        time.sleep(0.05)
    if task["status"] == "failed":
        problem = task["result"]["error"]
        return {"status": problem["status"], "problem": problem}
    return {"status": answer.status_code, "output": task["result"]["output"]}


def refused_naming(outcome: dict[str, Any], status: int, field: str, *words: str) -> str:
    assert outcome["status"] == status, outcome
    problem = outcome["problem"]
    reasons = {p["name"]: p["reason"] for p in problem["invalid_params"]}
    assert field in reasons, problem
    for word in words:
        assert word in reasons[field], (word, reasons[field])
    return str(reasons[field])


# ---- item 1: tar headers bounded before they are parsed ------------------------------------


def pax_archive(path: Path, pax: dict[str, str]) -> None:
    """A gzip tar at `path` with one file member whose PAX header carries `pax`."""
    member = tarfile.TarInfo("f.txt")
    member.size = 1
    member.pax_headers = pax
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(member, io.BytesIO(b"x"))


def declared_pax_archive(path: Path, size: int) -> None:
    """A gzip tar at `path` whose first header is a PAX header declaring `size` bytes (NULs,
    which gzip shrinks a thousandfold): `tarfile` reads such a header whole into memory."""
    header = tarfile.TarInfo("PaxHeader/f.txt")
    header.type, header.size = tarfile.XHDTYPE, size
    member = tarfile.TarInfo("f.txt")
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(header.tobuf(tarfile.USTAR_FORMAT))
        chunk = bytes(1 << 20)
        for _ in range(size // len(chunk)):
            out.write(chunk)
        out.write(member.tobuf(tarfile.USTAR_FORMAT) + bytes(1024))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


class HealthWatch:
    """`GET /health` every 50 ms in a thread; the slowest answer seen."""

    def __init__(self, url: str) -> None:
        self.url, self.slowest, self.count = url, 0.0, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        with httpx.Client(timeout=60) as client:
            while not self.stop.is_set():
                started = time.monotonic()
                client.get(f"{self.url}/health")
                took = time.monotonic() - started
                if self.count:  # the first one opens the connection
                    self.slowest = max(self.slowest, took)
                self.count += 1
                time.sleep(0.05)

    def __enter__(self) -> HealthWatch:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=120)


@pytest.mark.parametrize(
    ("make", "bound"),
    [
        (lambda path: pax_archive(path, {"mtime": "1" * 40_569}), "at most 30 digits"),
        (
            lambda path: pax_archive(path, {"comment": os.urandom(520_000).hex()}),
            "at most 65536 are read",
        ),
        (lambda path: declared_pax_archive(path, 256 << 20), "at most 65536 are read"),
    ],
    ids=["40569-digit-number", "1MiB-pax-header", "256MiB-declared-pax-header"],
)
def test_tar_headers_are_bounded_before_they_are_parsed(
    http: httpx.Client, served: Served, home: Path, make: Any, bound: str
) -> None:
    archive = home / "bomb.tgz"
    make(archive)
    assert archive.stat().st_size < 1536 * 1024, "a small upload"
    before = rss_kib(served.pid)
    with HealthWatch(served.url) as watch:
        outcome = call(
            http, served.alice, "extract", {"path": str(archive), "target_path": f"{home}/out"}
        )
        time.sleep(0.3)
    assert watch.count >= 3 and watch.slowest < 0.2, f"/health took {watch.slowest:.3f} s"
    grown = rss_kib(served.pid) - before
    assert grown < 16 * 1024, f"the server grew by {grown} KiB"
    refused_naming(outcome, 400, "path", bound, "at byte 0")
    assert not (home / "out").exists()


# ---- item 2: the gateway's own files and folders, at any depth -----------------------------


def test_the_gateway_folders_are_refused_inside_any_tree(
    http: httpx.Client, served: Served, home: Path
) -> None:
    srv = served.top / "srv"
    for operation, target in (("cp", f"{home}/copy"), ("compress", f"{home}/srv.tgz")):
        reason = refused_naming(
            call(http, served.alice, operation, {"path": str(srv), "target_path": target}),
            403,
            "path",
            "gateway's own",
        )
        assert str(srv) in reason, reason
        assert not Path(target).exists() and os.listdir(home) == [], "nothing written"
    # A hard link to the store's write-ahead log (as a job of the gateway's account could
    # make) is the store itself: not served.
    wal = srv / "db" / "jobs.db-wal"
    if not wal.exists():
        wal = srv / "db" / "jobs.db"
    os.link(wal, home / "innocent")
    outcome = call(http, served.bob, "download", {"path": f"{home}/innocent"})
    assert outcome["status"] == 404, outcome
    os.unlink(home / "innocent")
    # The tokens file (configured outside the data directory) is not removed, and the folders
    # holding the gateway's keep their mode and owner.
    tokens = srv / "keys" / "tokens.json"
    outcome = call(http, served.bob, "rm", {"path": str(tokens)})
    assert outcome["status"] == 404, outcome
    assert tokens.exists()
    for folder in (srv, srv / "db", served.top):
        mode = folder.stat().st_mode
        refused_naming(
            call(http, served.alice, "chmod", {"path": str(folder), "mode": "000"}),
            403,
            "path",
            "holds the gateway's own",
        )
        refused_naming(
            call(http, served.alice, "chown", {"path": str(folder), "owner": "root"}),
            403,
            "path",
            "holds the gateway's own",
        )
        assert folder.stat().st_mode == mode
    refused_naming(
        call(http, served.alice, "rm", {"path": str(srv), "recursive": True}), 403, "path"
    )
    assert tokens.exists() and (srv / "db" / "jobs.db").exists()
    assert http.get(f"{V2}/account/projects", headers=headers(served.bob)).status_code == 200


# ---- item 3: no privilege change ------------------------------------------------------------


def test_no_setuid_and_no_chown_to_another_account(
    http: httpx.Client, served: Served, home: Path
) -> None:
    assert os.getuid() == 0, "the gateway runs as root here: the case that matters"
    program = home / "program"
    program.write_bytes(b"#!/bin/sh\n")
    for mode in ("4755", "2755", "6777", "1777", "7000"):
        reason = refused_naming(
            call(http, served.alice, "chmod", {"path": str(program), "mode": mode}),
            422,
            "mode",
            "setuid",
            "allow_special_modes",
        )
        assert mode in reason
        assert program.stat().st_mode & 0o7000 == 0
    assert call(http, served.alice, "chmod", {"path": str(program), "mode": "755"})["status"] == 200
    for owner, group, field in (
        ("nobody", None, "owner"),
        ("daemon", "daemon", "owner"),
        (None, "daemon", "group"),
    ):
        body = {
            "path": str(program),
            **({"owner": owner} if owner else {}),
            **({"group": group} if group else {}),
        }
        reason = refused_naming(call(http, served.alice, "chown", body), 403, field)
        assert repr(owner or group) in reason and "root" in reason, reason
        assert (program.stat().st_uid, program.stat().st_gid) == (0, 0)
    assert (
        call(http, served.alice, "chown", {"path": str(program), "owner": "root", "group": "root"})[
            "status"
        ]
        == 200
    )


# ---- item 5: deep trees ---------------------------------------------------------------------


def nested(folder: Path, depth: int) -> None:
    """`folder` with `depth` folders `d` nested in it (made by descriptors: a path this long
    is beyond PATH_MAX, and os.makedirs recurses)."""
    folder.mkdir()
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as out:
            out.write("deep\n")
    finally:
        os.close(fd)


def test_deep_trees_are_answered(http: httpx.Client, served: Served, home: Path) -> None:
    nested(home / "deep", 1100)
    listing = call(http, served.alice, "ls", {"path": str(home / "deep"), "recursive": True})
    assert listing["status"] == 200, listing
    outcome = call(http, served.alice, "rm", {"path": str(home / "deep"), "recursive": True})
    assert outcome["status"] == 200, outcome
    assert not (home / "deep").exists()
    # One member 10,500 folders deep: its name is beyond PATH_MAX, refused by name.
    member = tarfile.TarInfo("d/" * 10_500 + "f")
    with tarfile.open(home / "deep.tgz", "w:gz", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(member, io.BytesIO(b""))
    refused_naming(
        call(
            http,
            served.alice,
            "extract",
            {"path": f"{home}/deep.tgz", "target_path": f"{home}/out"},
        ),
        400,
        "path",
        "PATH_MAX",
    )
    # Six members 2,000 folders deep each imply 12,000 folders: beyond the 10,000 entries.
    with tarfile.open(home / "wide.tgz", "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for index in range(6):
            tar.addfile(tarfile.TarInfo(f"t{index}/" + "d/" * 2000 + "f"), io.BytesIO(b""))
    refused_naming(
        call(
            http,
            served.alice,
            "extract",
            {"path": f"{home}/wide.tgz", "target_path": f"{home}/out"},
        ),
        413,
        "path",
        "folders they imply",
    )
    assert not (home / "out").exists()


# ---- item 6: archives made the ordinary way ------------------------------------------------


def test_a_dot_rooted_archive_is_extracted(http: httpx.Client, served: Served, home: Path) -> None:
    (home / "d" / "sub").mkdir(parents=True)
    (home / "d" / "a.txt").write_text("alpha\n")
    (home / "d" / "sub" / "b.txt").write_text("beta\n")
    subprocess.run(["tar", "-C", str(home / "d"), "-czf", str(home / "x.tgz"), "."], check=True)
    outcome = call(
        http, served.alice, "extract", {"path": f"{home}/x.tgz", "target_path": f"{home}/out"}
    )
    assert outcome["status"] == 201, outcome
    assert (home / "out" / "a.txt").read_text() == "alpha\n"
    assert (home / "out" / "sub" / "b.txt").read_text() == "beta\n"
    # Never through: `./../x` and `/x`.
    for name in ("./../x", "/x"):
        with tarfile.open(home / "bad.tgz", "w:gz") as tar:
            tar.addfile(tarfile.TarInfo(name), io.BytesIO(b""))
        refused_naming(
            call(
                http,
                served.alice,
                "extract",
                {"path": f"{home}/bad.tgz", "target_path": f"{home}/bad"},
            ),
            400,
            "path",
        )
        assert not (home / "bad").exists() and not (home / "x").exists()
        (home / "bad.tgz").unlink()
