"""A file agent whose gateway went away in the middle of a long write leaves nothing behind:
its watchdog stops the worker whether it learns it from the end of its input or from a
progress line it could not deliver, and what a writer left that no live process owns (a
zombie included) is stale for the next writer.

Why: a serve killed with -9 while an agent relays a progress line made the watchdog die of
SIGPIPE on the spot (its worker with it, by PDEATHSIG): the half-made `.iri-work-*` then
stayed until the next writer into that folder, and not even then where the container's
first process never reaped the dead worker (a zombie answers `kill(pid, 0)`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from iri_gateway.service.files import shipping
from iri_gateway.service.files.remote import reader, writer
from tests.service.files.agent_requests import compress_request


def slow_compress(folder: Path) -> dict[str, Any]:
    """A gzip compress of about 48 MiB from `folder`/big into `folder`/made.tgz (seconds of
    work, reporting progress every 50 ms)."""
    big = folder / "big"
    big.mkdir()
    noise = os.urandom(1 << 20)
    for index in range(48):
        (big / f"f{index:02}").write_bytes(noise[index:] + noise[:index])

    return compress_request(
        folder, "big", max_files=1000, max_bytes=1 << 30, watch=True, progress=0.05
    )


def agent() -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-I", "-c", shipping.program(shipping.FILE_AGENT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def wait_for_work(folder: Path) -> None:
    deadline = time.monotonic() + 30
    while not any(p.name.startswith(writer.WORK_PREFIX) for p in folder.iterdir()):
        assert time.monotonic() < deadline, "the compress never began to write"
        time.sleep(0.01)


def test_an_agent_whose_reader_went_away_stops_its_worker_and_removes_its_work(
    tmp_path: Path,
) -> None:
    """Its input stays open (the gateway's end of it not closed yet): only the progress line
    it cannot deliver tells the watchdog. It must stop the worker, remove what it wrote and
    exit, not die with the worker's half-made file left."""
    process = agent()
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(slow_compress(tmp_path)).encode() + b"\n")
    process.stdin.flush()
    first = json.loads(process.stdout.readline())
    assert "progress" in first, first
    wait_for_work(tmp_path)
    process.stdout.close()  # the gateway's reading end is gone; its writing end is not
    try:
        assert process.wait(timeout=30) == 0
    finally:
        process.stdin.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big"]


def test_an_agent_whose_input_ended_removes_its_work_and_says_so(tmp_path: Path) -> None:
    """The other way the gateway's death reaches the watchdog (a kill -9 does both)."""
    process = agent()
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(slow_compress(tmp_path)).encode() + b"\n")
    process.stdin.close()
    said = [json.loads(line) for line in process.stdout]
    assert process.wait(timeout=30) == 0
    assert said[-1]["ok"] is False and said[-1]["error"] == "canceled", said[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big"]


def test_a_zombie_writers_work_is_stale(tmp_path: Path) -> None:
    """A writer that exited but was never reaped (a zombie) writes nothing more: its hidden
    name is stale, while a live process's is not."""
    dead = subprocess.Popen(["true"])  # never waited for until the end: a zombie meanwhile
    live = subprocess.Popen(["sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{dead.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "`true` never exited"
            time.sleep(0.01)
        host = reader.writer_host()
        assert host is not None
        for pid in (dead.pid, live.pid):
            (tmp_path / f"{writer.WORK_PREFIX}{host}-{pid}-0123456789abcdef").write_text("x")
        folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            stale = reader.stale_names(folder, writer.WORK_PREFIX)
        finally:
            os.close(folder)
        assert stale == [f"{writer.WORK_PREFIX}{host}-{dead.pid}-0123456789abcdef"]
    finally:
        live.kill()
        live.wait()
        dead.wait()
