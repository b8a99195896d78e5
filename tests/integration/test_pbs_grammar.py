"""The PBS stand-ins (tests/standins/pbs/) against the real OpenPBS 23.06.06: the same command
lines through both, comparing exit codes and standard error (job ids and server names
normalised) and the shape of `qstat -f -F json`.

Each side gets jobs in the same states: the real server by running them (held with `-h`
for queued, `sleep` for running, `true` for finished), the stand-ins by
`pbs-standin-advance`. A difference here is fixed in the stand-in (or, where the adapter read
the real words wrongly, in the adapter), so the stand-in tests that remain speak the real
grammar.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import PbsInfo
from tests.support.paths import STANDINS

pytestmark = pytest.mark.integration

STANDIN = STANDINS / "pbs"
SCRIPT = "#!/bin/bash\n#PBS -N grammar\n#PBS -l select=1:ncpus=1\n#PBS -l walltime=00:05:00\n"
WAIT = 120.0
_ID = re.compile(r"\b\d+(?:\[\d*\])?\.[A-Za-z0-9][A-Za-z0-9_.-]*")


class Side:
    """One PBS: the real server, or the stand-ins in their own folder."""

    def __init__(self, name: str, env: dict[str, str], folder: Path) -> None:
        self.name, self.env, self.folder = name, env, folder
        self.made: list[str] = []

    def run(self, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), input=stdin, env=self.env, capture_output=True, text=True, timeout=60
        )

    def submit(self, body: str, *options: str) -> str:
        done = self.run("qsub", "-o", f"{self.folder}/o", "-j", "oe", *options, stdin=SCRIPT + body)
        assert done.returncode == 0, (self.name, done.stderr)
        job_id = done.stdout.strip()
        self.made.append(job_id)
        return job_id

    def document(self, *job_ids: str) -> dict[str, Any]:
        done = self.run("qstat", "-f", "-F", "json", "-x", *job_ids)
        parsed: dict[str, Any] = json.loads(done.stdout, strict=False)
        return parsed

    def state(self, job_id: str) -> str:
        state: str = self.document(job_id)["Jobs"][job_id]["job_state"]
        return state

    def bring(self, job_id: str, letter: str) -> None:
        """The job in state `letter` (R or F): advanced on the stand-ins, waited for on the real."""
        if self.name == "standin":
            if letter == "F" and self.state(job_id) != "R":
                self.run("pbs-standin-advance", job_id, "R")
            extra = ["--exit", "0"] if letter == "F" else []
            assert self.run("pbs-standin-advance", job_id, letter, *extra).returncode == 0
            return
        deadline = time.monotonic() + WAIT
        while (seen := self.state(job_id)) != letter:
            assert time.monotonic() < deadline, f"{job_id} is {seen}, not {letter}, after {WAIT} s"
            time.sleep(0.5)


def normalise(text: str) -> str:
    return _ID.sub("<id>", text).strip()


@pytest.fixture
def sides(pbs: PbsInfo) -> Iterator[dict[str, Side]]:
    for program in STANDIN.iterdir():
        if not program.suffix:
            program.chmod(program.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    folder = Path(tempfile.mkdtemp(prefix="iri-pbs-grammar-", dir="/tmp"))
    folder.chmod(0o777)
    standin_env = {
        **os.environ,
        "PATH": f"{STANDIN}:{os.environ['PATH']}",
        "PBS_STANDIN_DIR": str(folder / "standin"),
    }
    both = {
        "real": Side("real", {**os.environ}, folder),
        "standin": Side("standin", standin_env, folder),
    }
    yield both
    for job_id in both["real"].made:
        subprocess.run(["qdel", "-W", "force", job_id], capture_output=True, timeout=30)
    shutil.rmtree(folder, ignore_errors=True)


def answers(sides: dict[str, Side], make: Any) -> dict[str, list[tuple[int, str]]]:
    """`make(side)` on both sides: each gives its (exit code, normalised stderr) list."""
    return {name: make(side) for name, side in sides.items()}


def test_refusals_and_their_words_match_the_real_server(sides: dict[str, Side]) -> None:
    """qsub/qmove to an unknown queue, qdel of unknown/finished/queued/running jobs, qalter and
    qmove of a running job, qrerun refusals, qstat of an unknown id: exit codes and words.
    The real server lets root (a manager) raise a running job's walltime and anyone rename
    it; the stand-in refused both (167) before."""
    jobs: dict[str, dict[str, str]] = {}
    for name, side in sides.items():
        jobs[name] = {
            "queued": side.submit("true\n", "-h"),
            "running": side.submit("sleep 300\n"),
            "once": side.submit("sleep 300\n", "-r", "n"),
            "done": side.submit("true\n"),
        }
    for name, side in sides.items():
        side.bring(jobs[name]["running"], "R")
        side.bring(jobs[name]["once"], "R")
        side.bring(jobs[name]["done"], "F")

    def commands(side: Side) -> list[tuple[int, str]]:
        mine = jobs[side.name]
        lines = [
            ("qsub", "-q", "nosuchqueue"),
            ("qmove", "nosuchqueue", mine["queued"]),
            ("qdel", "999999.pbshost"),
            ("qdel", mine["done"]),
            ("qalter", "-A", "Proj9", mine["running"]),
            ("qalter", "-l", "walltime=00:09:00", mine["running"]),  # root is a manager
            ("qalter", "-N", "renamed", mine["running"]),
            ("qmove", "debug", mine["running"]),
            ("qrerun", mine["queued"]),
            ("qrerun", mine["done"]),
            ("qrerun", mine["once"]),
            ("qrerun", "999999.pbshost"),
            ("qstat", "-f", "-F", "json", "-x", "999999.pbshost"),
            ("qdel", mine["queued"]),
            ("qdel", mine["running"]),
        ]
        seen = []
        for argv in lines:
            done = side.run(*argv, stdin=SCRIPT + "true\n" if argv[0] == "qsub" else None)
            seen.append((done.returncode, normalise(done.stderr)))
        return seen

    got = answers(sides, commands)
    assert got["standin"] == got["real"]
    assert got["real"][9] == (35, "qrerun: Job has finished"), "the real words, no id"


def test_qstat_document_shape_and_what_qsub_prints(sides: dict[str, Side]) -> None:
    """qsub prints `<n>.<server>` alone; qstat's document: the header keys, job_state a string,
    substate and Exit_status integers, Variable_List an object, times ctime text, timestamp
    an epoch number; an unknown id mixed with known ones is left out (exit 153)."""
    shapes = {}
    for name, side in sides.items():
        done_id = side.submit("true\n", "-v", "TAG=iri-gateway:x")
        held = side.submit("true\n", "-h")
        assert re.fullmatch(r"\d+\.[A-Za-z0-9.-]+", done_id), done_id
        side.bring(done_id, "F")
        mixed = side.run("qstat", "-f", "-F", "json", "-x", "999999.pbshost", done_id, held)
        document = json.loads(mixed.stdout, strict=False)
        finished, queued = document["Jobs"][done_id], document["Jobs"][held]
        shapes[name] = {
            "exit": mixed.returncode,
            "stderr": normalise(mixed.stderr),
            "header": sorted(key for key in document if key != "Jobs"),
            "jobs": len(document["Jobs"]),
            "timestamp": type(document["timestamp"]).__name__,
            "types": {
                key: type(finished.get(key)).__name__
                for key in ("job_state", "substate", "Exit_status", "Variable_List", "ctime")
            },
            "held": (queued["job_state"], queued["substate"], "Exit_status" in queued),
            "tag": finished["Variable_List"].get("TAG"),
        }
    assert shapes["standin"] == shapes["real"]
    assert shapes["real"]["types"] == {
        "job_state": "str",
        "substate": "int",
        "Exit_status": "int",
        "Variable_List": "dict",
        "ctime": "str",
    }
