"""scripts/pbs itself: where the OpenPBS source comes from, its checksum, and the running
server it promises (issue 26). Without the source and without a build, the PBS tests fail
with the script's words (tests/integration/conftest.py `start_pbs`), never skip."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import PBS_SCRIPT, PbsInfo

pytestmark = pytest.mark.integration


def run_copy(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The script run from a checkout of its own in `tmp_path`: no vendor folder beside it,
    no git origin to look beside."""
    scripts = tmp_path / "checkout" / "scripts"
    scripts.mkdir(parents=True)
    shutil.copy2(PBS_SCRIPT, scripts / "pbs")
    return subprocess.run(
        [str(scripts / "pbs"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        check=False,
    )


def test_without_the_source_it_says_where_to_get_it(tmp_path: Path) -> None:
    done = run_copy(tmp_path, "source", IRI_OPENPBS_SOURCE=str(tmp_path / "nowhere"))
    assert done.returncode == 1
    words = " ".join(done.stderr.split())
    assert "openpbs-23.06.06-py311.tar.gz was not found" in words
    assert "https://github.com/openpbs/openpbs" in words
    assert "dd2a24640 and 1d17427c0" in words
    assert "set IRI_OPENPBS_SOURCE to it and IRI_OPENPBS_SHA256 to its checksum" in words


def test_an_archive_with_another_checksum_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "openpbs-23.06.06-py311.tar.gz"
    fake.write_bytes(b"not the archive")
    done = run_copy(tmp_path, "source", IRI_OPENPBS_SOURCE=str(tmp_path))
    assert done.returncode == 1
    assert f"{fake} has SHA-256" in done.stderr
    assert "32e062db57802af1c5e32a57ce9d99ce5debf1a6797a8211e054e5483c408365" in done.stderr
    own = run_copy(
        tmp_path / "own",
        "source",
        IRI_OPENPBS_SOURCE=str(tmp_path),
        IRI_OPENPBS_SHA256="d8250fce32177cdb504fbe8f4fcf8d2af251c5caec93098b33693066b1462870",
    )
    assert own.returncode == 0, own.stderr
    assert own.stdout.strip() == str(fake)


def test_the_running_server_is_what_the_script_promises(pbs: PbsInfo) -> None:
    status = subprocess.run(
        [str(PBS_SCRIPT), "status"], capture_output=True, text=True, timeout=60, check=False
    )
    assert status.returncode == 0, status.stdout + status.stderr
    assert "build: OpenPBS 23.06.06 in /opt/pbs" in status.stdout
    server = subprocess.run(
        [str(pbs.commands / "qmgr"), "-c", "print server"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "set server job_history_enable = True" in server
    assert "set queue parked started = False" in server
    nodes = subprocess.run(
        [str(pbs.commands / "pbsnodes"), "-av"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    for vnode in ("pbs-n1", "pbs-n2", "pbs-n3", "pbs-n4"):
        assert f"\n{vnode}\n" in f"\n{nodes}", nodes
    assert nodes.count("resources_available.ngpus = 2") == 4
    # The MOM (and so every job) may open as many files as Podman gives a container
    # (containers.conf nofile 20000): PBS's own limits file said 16384, and `podman run` in
    # a job then failed ("error setting rlimit type 7"), seen in a fresh-machine CI run.
    mom = subprocess.run(["pgrep", "-x", "pbs_mom"], capture_output=True, text=True, check=True)
    limits = Path(f"/proc/{mom.stdout.split()[0]}/limits").read_text()
    (line,) = [text for text in limits.splitlines() if text.startswith("Max open files")]
    assert int(line.split()[3]) >= 20000, line
