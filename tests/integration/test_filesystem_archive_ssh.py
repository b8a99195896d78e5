"""`compress` and `extract` through the real SSH login node, on a real serve (the set-up of
`test_filesystem_write_ssh`): the archiver runs there as the mapped account, so what it makes
belongs to that account, and a hostile archive changes nothing outside.
"""

from __future__ import annotations

import os
import pwd
import tarfile
from pathlib import Path

import httpx
import pytest

from tests.api.test_filesystem_archive import hostile, member, tree
from tests.api.test_filesystem_write import snapshot
from tests.integration import test_filesystem_write_ssh as write_tests
from tests.integration.conftest import ClusterInfo
from tests.integration.test_filesystem_ssh import Served
from tests.integration.test_filesystem_write_ssh import output, refused

pytestmark = pytest.mark.integration
http, served, work, outside = (
    write_tests.http,
    write_tests.served,
    write_tests.work,
    write_tests.outside,
)
"""The fixtures of `test_filesystem_write_ssh`, used here as they are."""


def owned(folder: Path, uid: int, gid: int) -> None:
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, uid, gid, follow_symlinks=False)


def test_round_trip_as_the_mapped_account(
    http: httpx.Client, served: Served, work: Path, cluster: ClusterInfo
) -> None:
    account = pwd.getpwnam(cluster.ssh_user)
    source = work / "src"
    (source / "sub").mkdir(parents=True)
    (source / "a.txt").write_text("over ssh\n")
    (source / "sub" / "b.bin").write_bytes(os.urandom(200_000))
    (source / "ln").symlink_to("sub/b.bin")
    owned(work, account.pw_uid, account.pw_gid)
    made = output(
        http, served.alice, "compress", {"path": str(source), "target_path": f"{work}/src.tgz"}, 201
    )
    assert made["type"] == "file"
    assert (work / "src.tgz").stat().st_uid == account.pw_uid, "made as the mapped account"
    output(
        http,
        served.alice,
        "extract",
        {"path": f"{work}/src.tgz", "target_path": f"{work}/out"},
        201,
    )
    assert tree(work / "out" / "src") == tree(source)
    assert (work / "out" / "src" / "a.txt").stat().st_uid == account.pw_uid


def test_an_escaping_archive_changes_nothing_outside(
    http: httpx.Client, served: Served, work: Path, outside: Path, cluster: ClusterInfo
) -> None:
    account = pwd.getpwnam(cluster.ssh_user)
    relative = os.path.relpath(outside / "planted", work / "out")
    hostile(work / "evil.tgz", member("fine.txt"), member(relative))
    hostile(work / "link.tgz", member("l", tarfile.SYMTYPE, str(outside)), member("l/x"))
    owned(work, account.pw_uid, account.pw_gid)
    before = snapshot(work)
    for archive, named in (("evil", relative), ("link", "l")):
        problem = refused(
            http,
            served.alice,
            "extract",
            {"path": f"{work}/{archive}.tgz", "target_path": f"{work}/out"},
            400,
            "path",
        )
        assert repr(named) in problem["detail"], problem
    assert snapshot(work) == before
    assert not (outside / "planted").exists() and not (outside / "x").exists()


def test_extract_into_an_existing_folder_as_the_mapped_account(
    http: httpx.Client, served: Served, work: Path, cluster: ClusterInfo
) -> None:
    account = pwd.getpwnam(cluster.ssh_user)
    (work / "dest").mkdir()
    (work / "dest" / "kept.txt").write_text("kept\n")
    (work / "clash").mkdir()
    (work / "clash" / "d").mkdir()
    hostile(work / "in.tgz", member("a.txt"), member("d", tarfile.DIRTYPE), member("d/b.txt"))
    owned(work, account.pw_uid, account.pw_gid)
    done = output(
        http,
        served.alice,
        "extract",
        {"path": f"{work}/in.tgz", "target_path": f"{work}/dest"},
        201,
    )
    assert done["name"] == f"{work}/dest"
    assert sorted(os.listdir(work / "dest")) == ["a.txt", "d", "kept.txt"]
    assert (work / "dest" / "d" / "b.txt").stat().st_uid == account.pw_uid
    before = snapshot(work)
    problem = refused(
        http,
        served.alice,
        "extract",
        {"path": f"{work}/in.tgz", "target_path": f"{work}/clash"},
        409,
        "target_path",
    )
    assert "'d'" in problem["detail"], problem
    assert snapshot(work) == before, "nothing written, nothing merged"
