"""`compress` and `extract` over HTTP on the `local` resource, with two users.

A round trip gives back the same tree (contents, modes, links). Each hostile archive, built
here with `tarfile`, is refused with a 4xx naming the member, and the disk shows nothing
landed: the outside folder is unchanged and the target's folder holds no target and no
half-made hidden folder. Another user's folders are 404 both ways.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.service.files.remote import archiver, writer
from tests.api import test_filesystem_write as write_tests
from tests.api.conftest import OfficialSchemas
from tests.api.test_filesystem import granted
from tests.api.test_filesystem_write import output, refused, snapshot

pytestmark = pytest.mark.anyio
app, bob, outside = write_tests.app, write_tests.bob, write_tests.outside
"""The fixtures of `test_filesystem_write`, used here as they are."""
LIMIT = 1024 * 1024
"""`cp_max_bytes` of the test app (test_filesystem_write's `app` fixture)."""


def tree(folder: Path) -> dict[str, Any]:
    """The tree below `folder` by relative path: file contents and modes, link texts."""
    seen: dict[str, Any] = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            seen[name] = ("link", os.readlink(path))
        elif path.is_dir():
            seen[name] = ("dir", path.stat().st_mode & 0o777)
        else:
            seen[name] = ("file", path.read_bytes(), path.stat().st_mode & 0o777)
    return seen


def hostile(path: Path, *members: tarfile.TarInfo, gz: bool = True, data: bytes = b"x") -> None:
    """A tar archive at `path` whose members are `members` (files get `data`)."""
    with tarfile.open(path, "w:gz" if gz else "w") as tar:
        for member in members:
            if member.isfile():
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
            else:
                tar.addfile(member)


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    return info


async def test_round_trip(
    client: httpx.AsyncClient, token: str, tmp_path: Path, official: OfficialSchemas
) -> None:
    home = granted(tmp_path)
    source = home / "project"
    (source / "sub" / "deeper").mkdir(parents=True)
    (source / "a.txt").write_text("alpha\n")
    (source / "sub" / "b.bin").write_bytes(bytes(range(256)) * 100)
    (source / "sub" / "deeper" / "c.txt").write_text("gamma\n")
    (source / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (source / "sub" / "run.sh").chmod(0o750)
    (source / "link").symlink_to("sub/b.bin")
    for kind in ("gzip", "none", "bzip2", "xz"):
        urn = f"urn:doe-iri:compression:{kind}"
        made = await output(
            client,
            token,
            "compress",
            {"path": str(source), "target_path": f"{home}/p.{kind}.tar", "compression": urn},
            201,
            official,
        )
        assert made["name"] == f"{home}/p.{kind}.tar" and made["type"] == "file"
        done = await output(
            client,
            token,
            "extract",
            {
                "path": f"{home}/p.{kind}.tar",
                "target_path": f"{home}/out.{kind}",
                "compression": urn,
            },
            201,
            official,
        )
        assert done["type"] == "directory"
        assert tree(home / f"out.{kind}" / "project") == tree(source), kind
        assert os.listdir(home / f"out.{kind}") == ["project"]
    # The default is gzip; only what matches the pattern is stored (folders always).
    await output(
        client,
        token,
        "compress",
        {"path": str(source), "target_path": f"{home}/txt.tgz", "match_pattern": r"\.txt$"},
        201,
    )
    with tarfile.open(home / "txt.tgz", "r:gz") as tar:
        assert sorted(m.name for m in tar if m.isfile()) == [
            "project/a.txt",
            "project/sub/deeper/c.txt",
        ]
    # An archive made inside what it stores does not store itself; a root itself is refused.
    await output(
        client,
        token,
        "compress",
        {
            "path": str(source),
            "target_path": f"{source}/self.tar",
            "compression": "urn:doe-iri:compression:none",
        },
        201,
    )
    with tarfile.open(source / "self.tar") as tar:
        assert "project/self.tar" not in tar.getnames() and "project/a.txt" in tar.getnames()
    (source / "self.tar").unlink()
    await refused(
        client,
        token,
        "compress",
        {"path": str(home), "target_path": f"{home}/all.tgz"},
        403,
        "path",
    )
    # Never replaced: an existing archive or folder is a 409, and stays as it was.
    before = (home / "txt.tgz").read_bytes()
    await refused(
        client,
        token,
        "compress",
        {"path": str(source), "target_path": f"{home}/txt.tgz"},
        409,
        "target_path",
    )
    assert (home / "txt.tgz").read_bytes() == before
    problem = await refused(
        client,
        token,
        "extract",
        {"path": f"{home}/txt.tgz", "target_path": f"{home}/out.gzip"},
        409,
        "target_path",
    )
    assert "'project'" in problem["detail"], "names the member already there"
    assert tree(home / "out.gzip" / "project") == tree(source)
    # Refusals of the request itself name their field.
    await refused(
        client,
        token,
        "compress",
        {"path": str(source), "target_path": f"{home}/x.tar", "dereference": True},
        400,
        "dereference",
    )
    await refused(
        client,
        token,
        "compress",
        {
            "path": str(source),
            "target_path": f"{home}/x.tar",
            "compression": "urn:doe-iri:compression:zstd",
        },
        422,
        "compression",
    )
    await refused(
        client,
        token,
        "compress",
        {"path": str(source), "target_path": f"{home}/x.tar", "match_pattern": "("},
        422,
        "match_pattern",
    )
    await refused(
        client,
        token,
        "extract",
        {"path": f"{home}/project/a.txt", "target_path": f"{home}/y"},
        400,
        "path",
    )
    assert not (home / "x.tar").exists() and not (home / "y").exists()


@pytest.mark.parametrize(
    ("members", "named"),
    [
        ([member("../x")], "../x"),
        ([member("ok/../../x")], "ok/../../x"),
        ([member("/abs")], "/abs"),
        ([member("evil", tarfile.SYMTYPE, "/etc")], "evil"),
        ([member("evil", tarfile.SYMTYPE, "../../outside")], "evil"),
        (
            [member("d", tarfile.DIRTYPE), member("d/l", tarfile.SYMTYPE, ".."), member("d/l/x")],
            "d/l",
        ),
        ([member("hard", tarfile.LNKTYPE, "../outside/secret")], "hard"),
        ([member("hard", tarfile.LNKTYPE, "/etc/passwd")], "hard"),
        ([member("fifo", tarfile.FIFOTYPE)], "fifo"),
        ([member("dev", tarfile.CHRTYPE)], "dev"),
        ([member("new\nline")], "new\nline"),
        ([member("ok.txt"), member("l", tarfile.SYMTYPE, "sub"), member("l/x")], "l/x"),
    ],
)
@pytest.mark.parametrize("existing", [False, True], ids=["new-folder", "existing-folder"])
async def test_hostile_archives_are_refused(
    client: httpx.AsyncClient,
    token: str,
    tmp_path: Path,
    outside: Path,
    members: list[tarfile.TarInfo],
    named: str,
    existing: bool,
) -> None:
    home = granted(tmp_path)
    hostile(home / "evil.tgz", *members)
    if existing:
        (home / "out").mkdir()
        (home / "out" / "kept").write_text("kept\n")
    before = snapshot(home)
    problem = await refused(
        client,
        token,
        "extract",
        {"path": f"{home}/evil.tgz", "target_path": f"{home}/out"},
        400,
        "path",
    )
    assert repr(named)[1:-1] in problem["detail"], problem
    assert snapshot(home) == before, "something was left in the target's folder"
    assert not (tmp_path / "granted" / "x").exists() and not (tmp_path / "x").exists()


async def test_extract_into_an_existing_folder_adds_and_never_replaces(
    client: httpx.AsyncClient, token: str, tmp_path: Path, outside: Path
) -> None:
    home = granted(tmp_path)
    dest = home / "dest"
    (dest / "old").mkdir(parents=True)
    (dest / "kept.txt").write_text("kept\n")
    hostile(
        home / "new.tgz",
        member("a.txt"),
        member("d", tarfile.DIRTYPE),
        member("d/b.txt"),
        member("ln", tarfile.SYMTYPE, "d/b.txt"),
    )
    done = await output(
        client, token, "extract", {"path": f"{home}/new.tgz", "target_path": str(dest)}, 201
    )
    assert done["name"] == str(dest) and done["type"] == "directory"
    assert sorted(os.listdir(dest)) == ["a.txt", "d", "kept.txt", "ln", "old"]
    assert (dest / "ln").read_text() == "x" and (dest / "kept.txt").read_text() == "kept\n"
    # Into a root itself, and through a link inside to a folder inside.
    await output(
        client, token, "extract", {"path": f"{home}/new.tgz", "target_path": str(home)}, 201
    )
    assert (home / "d" / "b.txt").read_text() == "x"
    (home / "to-old").symlink_to("dest/old")
    await output(
        client, token, "extract", {"path": f"{home}/new.tgz", "target_path": f"{home}/to-old"}, 201
    )
    assert sorted(os.listdir(dest / "old")) == ["a.txt", "d", "ln"]
    # Any top-level name already there (a file, a folder: never merged, a dangling link) is
    # a 409 naming it, and nothing is written.
    for taken, make in (
        ("a.txt", lambda p: p.write_text("mine\n")),
        ("d", Path.mkdir),
        ("ln", lambda p: p.symlink_to("nowhere")),
    ):
        clash = home / f"clash-{taken}"
        clash.mkdir()
        make(clash / taken)
        before = snapshot(home)
        problem = await refused(
            client,
            token,
            "extract",
            {"path": f"{home}/new.tgz", "target_path": str(clash)},
            409,
            "target_path",
        )
        assert repr(taken) in problem["detail"], problem
        assert snapshot(home) == before
    # A file, or a link out, as the target is still a 409, as before.
    (home / "out-link").symlink_to(outside)
    for target in ("kept-file", "out-link"):
        (home / "kept-file").write_text("f\n")
        await refused(
            client,
            token,
            "extract",
            {"path": f"{home}/new.tgz", "target_path": f"{home}/{target}"},
            409,
            "target_path",
        )
    assert sorted(os.listdir(outside)) == ["deep", "link", "secret"]


@pytest.mark.parametrize("racer", ["file", "empty-folder"])
@pytest.mark.parametrize("renameat2", [True, False], ids=["renameat2", "link-unlink"])
def test_a_name_taken_while_extracting_is_never_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, racer: str, renameat2: bool
) -> None:
    """A name made in the folder between the check and the move (here: by the unpacker's
    last step) ends in a refusal (`exists`, the 409) naming it, the folder as it was apart
    from what the racer made, which is untouched; without renameat2 the fallback moves
    refuse just the same. The archiver is called here directly (the serve runs it in its
    file agent, a process a test cannot patch)."""
    home = granted(tmp_path)
    dest = home / "dest"
    dest.mkdir()
    (dest / "kept.txt").write_text("kept\n")
    hostile(
        home / "race.tgz",
        member("a", tarfile.DIRTYPE),
        member("a/in.txt"),
        member("m"),
        member("b", tarfile.DIRTYPE),
        member("b/in.txt"),
    )
    if not renameat2:
        monkeypatch.setattr(writer, "_renameat2", lambda: None)
    finish = archiver._Unpacker.finish

    def finish_then_race(unpacker: archiver._Unpacker) -> None:
        finish(unpacker)
        (dest / "b").mkdir() if racer == "empty-folder" else (dest / "b").write_text("race\n")

    def place(*rest: str) -> dict[str, Any]:
        return {"base": str(home), "top": [], "reserved": [], "rest": list(rest)}

    request = {
        "op": "extract",
        "path": place("race.tgz"),
        "target": place("dest"),
        "compression": "gzip",
        "max_files": 100,
        "max_bytes": 2**20,
    }
    monkeypatch.setattr(archiver._Unpacker, "finish", finish_then_race)
    answer = archiver.serve(dict(request))
    assert answer["ok"] is False and answer["error"] == "exists", answer
    assert answer["field"] == "target_path" and "'b'" in answer["detail"], answer
    assert sorted(os.listdir(dest)) == ["b", "kept.txt"], "moved back, fresh folder removed"
    if racer == "file":
        assert (dest / "b").read_text() == "race\n"
    else:
        assert os.listdir(dest / "b") == []
    # Without a racer, the same archive goes in whole.
    monkeypatch.setattr(archiver._Unpacker, "finish", finish)
    (dest / "b").rmdir() if racer == "empty-folder" else (dest / "b").unlink()
    assert archiver.serve(dict(request))["ok"] is True
    assert tree(dest) == {
        "a": ("dir", 0o644),
        "a/in.txt": ("file", b"x", 0o644),
        "b": ("dir", 0o644),
        "b/in.txt": ("file", b"x", 0o644),
        "kept.txt": ("file", b"kept\n", 0o644),
        "m": ("file", b"x", 0o644),
    }


async def test_extract_is_bounded(
    client: httpx.AsyncClient, token: str, tmp_path: Path, outside: Path
) -> None:
    home = granted(tmp_path)
    # Declared beyond the limit: refused before anything is written.
    hostile(home / "big.tgz", member("big"), data=b"\0" * (LIMIT + 1))
    before = snapshot(home)
    problem = await refused(
        client,
        token,
        "extract",
        {"path": f"{home}/big.tgz", "target_path": f"{home}/out"},
        413,
        "path",
    )
    assert "'big'" in problem["detail"]
    # Small members that together pass it, and too many members.
    hostile(home / "many.tgz", *[member(f"m{i}") for i in range(30)])
    hostile(home / "sum.tgz", member("a"), member("b"), data=b"\0" * (LIMIT // 2 + 1))
    before = snapshot(home)
    for name in ("many", "sum"):
        await refused(
            client,
            token,
            "extract",
            {"path": f"{home}/{name}.tgz", "target_path": f"{home}/out"},
            413,
            "path",
        )
    assert snapshot(home) == before
    # Compress is bounded too, and leaves no partial archive.
    (home / "huge").write_bytes(b"\0" * (LIMIT + 1))
    await refused(
        client,
        token,
        "compress",
        {"path": f"{home}/huge", "target_path": f"{home}/huge.tgz"},
        413,
        "path",
    )
    assert not (home / "huge.tgz").exists()


async def test_links_out_are_stored_as_links_never_followed(
    client: httpx.AsyncClient, token: str, tmp_path: Path, outside: Path
) -> None:
    home = granted(tmp_path)
    (home / "src").mkdir()
    (home / "src" / "out").symlink_to(outside / "secret")
    await output(
        client, token, "compress", {"path": f"{home}/src", "target_path": f"{home}/src.tgz"}, 201
    )
    with tarfile.open(home / "src.tgz", "r:gz") as tar:
        stored = tar.getmember("src/out")
        assert stored.issym() and stored.linkname == str(outside / "secret")
        assert b"SECRET" not in b"".join(
            f.read() for m in tar if m.isfile() and (f := tar.extractfile(m)) is not None
        )
    # A link to outside as the source, or as a folder on the way, is not followed.
    (home / "way").symlink_to(outside)
    await refused(
        client,
        token,
        "compress",
        {"path": f"{home}/way/secret", "target_path": f"{home}/s.tgz"},
        404,
        "path",
    )
    await refused(
        client,
        token,
        "compress",
        {"path": f"{home}/src", "target_path": f"{home}/way/s.tgz"},
        404,
        "target_path",
    )
    await refused(
        client,
        token,
        "extract",
        {"path": f"{home}/src.tgz", "target_path": f"{home}/way/x"},
        404,
        "target_path",
    )
    (outside / ".." / "outside.tgz").write_bytes((home / "src.tgz").read_bytes())
    await refused(
        client,
        token,
        "extract",
        {"path": f"{tmp_path}/outside.tgz", "target_path": f"{home}/x"},
        404,
        "path",
    )
    (tmp_path / "outside.tgz").unlink()
    assert not (home / "x").exists()


async def test_another_users_folders_are_not_found(
    app: FastAPI, client: httpx.AsyncClient, token: str, bob: str, tmp_path: Path
) -> None:
    home, bob_home = granted(tmp_path), granted(tmp_path, "bob")
    (bob_home / "d").mkdir()
    (bob_home / "d" / "f").write_text("bob\n")
    hostile(bob_home / "b.tgz", member("f"))
    hostile(home / "a.tgz", member("f"))
    before = snapshot(bob_home)
    await refused(
        client,
        token,
        "compress",
        {"path": f"{bob_home}/d", "target_path": f"{home}/stolen.tgz"},
        404,
        "path",
    )
    await refused(
        client,
        token,
        "compress",
        {"path": f"{home}/a.tgz", "target_path": f"{bob_home}/planted.tgz"},
        404,
        "target_path",
    )
    await refused(
        client,
        token,
        "extract",
        {"path": f"{bob_home}/b.tgz", "target_path": f"{home}/stolen"},
        404,
        "path",
    )
    await refused(
        client,
        token,
        "extract",
        {"path": f"{home}/a.tgz", "target_path": f"{bob_home}/planted"},
        404,
        "target_path",
    )
    assert snapshot(bob_home) == before
    assert not (home / "stolen.tgz").exists() and not (home / "stolen").exists()
    # Bob may do with his own what Alice may not.
    await output(
        client,
        bob,
        "extract",
        {"path": f"{bob_home}/b.tgz", "target_path": f"{bob_home}/mine"},
        201,
    )
    assert (bob_home / "mine" / "f").read_text() == "x"
