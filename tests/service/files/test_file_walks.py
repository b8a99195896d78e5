"""The agent's tree walks are iterative with one descriptor held (issue 23 item 5), the tar
header scanner (item 1) refuses each kind of header it bounds and passes ordinary archives,
and setuid bits are set only when the profile allows them (item 3).

Run in-process against the real filesystem (the agent's modules are what runs on the login
node too); the trees are deeper than Python's recursion limit, and the descriptor limit is
lowered to 64 while they are walked.
"""

from __future__ import annotations

import io
import os
import resource
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from iri_gateway.service.files.remote import archiver, tarheaders, writer

DEPTH = 3000
"""Deeper than the recursion limit (1,000) and than 64 descriptors."""


def nested(folder: Path, depth: int) -> None:
    folder.mkdir()
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        os.symlink("../d", "link", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    os.close(fd)


def depth_of(folder: Path) -> int:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    count = 0
    try:
        while "d" in os.listdir(fd):
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd, count = inner, count + 1
    finally:
        os.close(fd)
    return count


@pytest.fixture
def few_descriptors() -> Iterator[None]:
    """At most 64 descriptors more than this test process holds already (a long pytest run
    keeps some open: a fixed limit of 64 would refuse the test's own first open), so a walk
    holding one per level of a 3,000-deep tree fails."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(name) for name in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1 + 64, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def place(tmp_path: Path, *rest: str) -> dict[str, Any]:
    return {"base": str(tmp_path), "top": [], "rest": list(rest), "reserved": []}


def test_deep_trees_are_copied_archived_and_removed(tmp_path: Path, few_descriptors: None) -> None:
    nested(tmp_path / "t", DEPTH)
    limits = {"max_files": 100_000, "max_bytes": 1 << 20}
    done = writer.serve(
        {"op": "cp", "path": place(tmp_path, "t"), "target": place(tmp_path, "c"), **limits}
    )
    assert done["ok"], done
    assert depth_of(tmp_path / "c") == DEPTH
    done = archiver.serve(
        {
            "op": "compress",
            "path": place(tmp_path, "c"),
            "target": place(tmp_path, "c.tar"),
            "compression": "none",
            **limits,
        }
    )
    assert done["ok"], done
    with tarfile.open(tmp_path / "c.tar") as tar:
        assert len(tar.getmembers()) == 2 * DEPTH + 2
    for name in ("t", "c"):
        done = writer.serve({"op": "rm", "path": place(tmp_path, name), "recursive": True})
        assert done["ok"], done
    assert sorted(os.listdir(tmp_path)) == ["c.tar"]


def test_a_deep_move_without_renameat2(
    tmp_path: Path, few_descriptors: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    nested(tmp_path / "t", DEPTH)
    monkeypatch.setattr(writer, "_renameat2", lambda: None)
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        writer.move_new(folder, "t", folder, "moved")
        with pytest.raises(FileExistsError):
            writer.move_new(folder, "moved", folder, "moved")
    finally:
        os.close(folder)
    assert os.listdir(tmp_path) == ["moved"] and depth_of(tmp_path / "moved") == DEPTH
    done = writer.serve({"op": "rm", "path": place(tmp_path, "moved"), "recursive": True})
    assert done["ok"], "and gone again (pytest's clean-up of old runs recurses)"


# ---- tar headers -----------------------------------------------------------------------------


def block(
    name: bytes = b"f",
    *,
    size: bytes = b"00000000001\0",
    kind: bytes = b"0",
    mode: bytes = b"0000644\0",
    checksum: bool = True,
) -> bytes:
    """One ustar header with these fields (checksum right unless told)."""
    raw = bytearray(512)
    raw[0 : len(name)] = name
    raw[100:108], raw[108:116], raw[116:124] = mode, b"0000000\0", b"0000000\0"
    raw[124:136], raw[136:148], raw[156:157] = size, b"00000000000\0", kind
    raw[257:263], raw[263:265] = b"ustar\0", b"00"
    raw[148:156] = b" " * 8
    value = sum(raw) if checksum else sum(raw) + 1
    raw[148:156] = b"%06o\0 " % value
    return bytes(raw)


def pax(payload: bytes) -> bytes:
    data = payload + bytes(-len(payload) % 512)
    return block(b"PaxHeader/f", size=b"%011o\0" % len(payload), kind=b"x") + data


def record(keyword: bytes, value: bytes) -> bytes:
    body = b" " + keyword + b"=" + value + b"\n"
    length = len(body) + 1
    while len(str(length).encode()) + len(body) != length:
        length += 1
    return str(length).encode() + body


MEMBER = block() + b"x" + bytes(511)
END = bytes(1024)


def scan(data: bytes) -> None:
    tarheaders.scan(io.BytesIO(data), max_members=10, max_bytes=1000)


@pytest.mark.parametrize(
    ("archive", "said"),
    [
        (pax(record(b"mtime", b"9" * 40_569)) + MEMBER, "at most 30 digits"),
        (pax(b"9" * 40 + b" mtime=1\n") + MEMBER, "without a length of at most 30 digits"),
        (pax(b"99 mtime=1\n") + MEMBER, "does not match"),
        (pax(record(b"path", b"a/" * 2100)) + MEMBER, "PATH_MAX"),
        (pax(record(b"GNU.sparse.size", b"1")) + MEMBER, "sparse"),
        (
            block(b"././@LongLink", size=b"%011o\0" % 5000, kind=b"L")
            + b"n" * 5000
            + bytes(-5000 % 512)
            + MEMBER,
            "GNU long name of 5000 bytes",
        ),
        (block(b"PaxHeader", size=b"%011o\0" % 70_000, kind=b"x"), "at most 65536 are read"),
        (block(size=b"0000000001x\0") + END, "neither octal digits nor base-256"),
        (block(checksum=False) + END, "wrong checksum"),
        (block(kind=b"S") + END, "sparse"),
        (
            block(b"PaxHeader", size=b"%011o\0" % len(record(b"size", b"1")), kind=b"g")
            + record(b"size", b"1")
            + bytes(512 - len(record(b"size", b"1")))
            + MEMBER,
            "global PAX size",
        ),
        (b"".join(pax(record(b"comment", b"x")) for _ in range(9)) + MEMBER, "more than 8"),
    ],
)
def test_each_bound_is_named(archive: bytes, said: str) -> None:
    with pytest.raises(tarheaders.HeaderRefused) as refused:
        scan(archive + END)
    assert refused.value.kind == "bad_header" and said in refused.value.message
    assert "byte" in refused.value.message


def test_limits_are_counted_before_data_is_read() -> None:
    big = block(size=b"\x80" + (1 << 60).to_bytes(11, "big"))
    with pytest.raises(tarheaders.HeaderRefused) as refused:
        scan(big + END)
    assert refused.value.kind == "too_large"
    with pytest.raises(tarheaders.HeaderRefused) as refused:
        scan(MEMBER * 11 + END)
    assert refused.value.kind == "too_large" and "more than 10 members" in refused.value.message


def test_ordinary_archives_pass(tmp_path: Path) -> None:
    scan(pax(record(b"mtime", b"1700000000.123456789")) + MEMBER + END)
    folder = tmp_path / "d"
    deep = folder / ("a" * 200) / ("b" * 200)  # beyond ustar's 100 and 155 bytes
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    (folder / "l").symlink_to(deep.relative_to(folder))
    for fmt in ("gnu", "posix", "ustar"):
        archive = tmp_path / f"{fmt}.tgz"
        if fmt == "ustar":
            with tarfile.open(archive, "w:gz", format=tarfile.USTAR_FORMAT) as tar:
                tar.add(deep / "f", "a" * 150 + "/" + "b" * 99)  # prefix and name
        else:
            subprocess.run(
                ["tar", f"--format={fmt}", "-C", str(folder), "-czf", str(archive), "."], check=True
            )
        with archive.open("rb") as stream:
            tarheaders.scan(tarheaders.decompressed(stream, "gz"), max_members=10, max_bytes=1000)


def test_special_modes_only_where_the_profile_allows_them(tmp_path: Path) -> None:
    """The writer's side of `files.allow_special_modes` (the HTTP side, refused by default,
    is in test_hostile_files)."""
    (tmp_path / "program").write_bytes(b"#!/bin/sh\n")
    request = {"op": "chmod", "path": place(tmp_path, "program"), "mode": "4755"}
    refused = writer.serve(request)
    assert refused["error"] == "special_mode" and refused["field"] == "mode"
    assert writer.serve({**request, "allow_special_modes": True})["ok"]
    assert (tmp_path / "program").stat().st_mode & 0o7777 == 0o4755
