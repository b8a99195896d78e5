"""What the upload and download tests share (locally and over the SSH login node): a serve
with a token for two users and a client for it, a large body made on the fly (never held
whole by the client either), the transfers themselves, what an upload may leave behind, and
the server's memory, sampled.

The memory is read from `/proc/PID/status`: `VmRSS` now and `VmHWM`, the kernel's own record
of the process's peak resident size, so a spike between two samples is not missed.
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.serve import RunningServe, clean_env, running_serve

V2 = "/api/v2"
MiB = 1024 * 1024
BOUNDARY = "iri-test-boundary-7f3a"


def tokens(data_dir: Path, users: tuple[str, ...] = ("alice", "bob")) -> dict[str, str]:
    """A bearer token for each user, written into DATA_DIR's tokens file before serve."""
    data_dir.mkdir(parents=True, exist_ok=True)
    return {
        user: subprocess.run(
            [
                sys.executable,
                "-m",
                "iri_gateway",
                "token",
                user,
                "--project",
                "proj1",
                "--data-dir",
                str(data_dir),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=clean_env(),
            check=True,
        ).stdout.strip()
        for user in users
    }


def headers(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "proj1", **extra}


@dataclass(frozen=True)
class Served:
    """A running serve and the bearer tokens of its two users, alice and bob."""

    serve: RunningServe
    alice: str
    bob: str
    data_dir: Path


@contextmanager
def serve_for_two(
    data_dir: Path, *, extra_env: dict[str, str] | None = None, args: tuple[str, ...] = ()
) -> Iterator[Served]:
    """`running_serve` on DATA_DIR, its tokens file holding alice's and bob's tokens."""
    made = tokens(data_dir)
    with running_serve(data_dir, extra_env=extra_env, args=args) as serve:
        yield Served(serve, made["alice"], made["bob"], data_dir)


@contextmanager
def client(served: Served, timeout: float) -> Iterator[httpx.Client]:
    """An HTTP client for the serve, with TIMEOUT seconds for each transfer."""
    with httpx.Client(base_url=served.serve.url, timeout=timeout) as http:
        yield http


def leftovers(folder: Path) -> list[str]:
    """The temporary files of uploads in FOLDER (none may stay after any upload)."""
    return sorted(name for name in os.listdir(folder) if name.startswith(".iri-upload-"))


def memory_kib(pid: int) -> dict[str, int]:
    """`VmRSS` and `VmHWM` of process PID, in KiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0])
    return values


@dataclass
class Payload:
    """`size` pseudo-random bytes made chunk by chunk; `digest` is their SHA-256 once sent."""

    size: int
    seed: int = 16
    chunk: int = MiB
    hasher: hashlib._Hash = field(default_factory=hashlib.sha256)

    def chunks(self) -> Iterator[bytes]:
        generator = random.Random(self.seed)
        left = self.size
        while left > 0:
            data = generator.randbytes(min(self.chunk, left))
            self.hasher.update(data)
            left -= len(data)
            yield data

    def multipart(self) -> Iterator[bytes]:
        """The payload as the official multipart/form-data body (part `file`)."""
        yield (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="big.bin"\r\nContent-Type: application/octet-stream\r\n\r\n'
        ).encode()
        yield from self.chunks()
        yield f"\r\n--{BOUNDARY}--\r\n".encode()

    @property
    def digest(self) -> str:
        return self.hasher.hexdigest()


def upload_multipart(
    http: httpx.Client, token: str, resource: str, path: str, payload: Payload
) -> httpx.Response:
    """POST the payload as multipart/form-data, chunked (no Content-Length)."""
    return http.post(
        f"{V2}/filesystem/upload/{resource}",
        params={"path": path},
        content=payload.multipart(),
        headers=headers(token, **{"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}),
    )


def download_digest(http: httpx.Client, token: str, resource: str, path: str) -> tuple[int, str]:
    """Stream a download (`Accept: application/octet-stream`): its size and SHA-256."""
    hasher = hashlib.sha256()
    size = 0
    with http.stream(
        "POST",
        f"{V2}/filesystem/download/{resource}",
        json={"path": path},
        headers=headers(token, Accept="application/octet-stream"),
    ) as answer:
        assert answer.status_code == 200, answer.read()
        assert int(answer.headers["content-length"]) > 0
        for data in answer.iter_bytes(MiB):
            hasher.update(data)
            size += len(data)
    return size, hasher.hexdigest()


def file_digest(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as stream:
        while data := stream.read(4 * MiB):
            hasher.update(data)
    return hasher.hexdigest()


class MemoryWatch:
    """Samples a process's memory every 50 ms in a thread while the block runs; `peak_kib`
    is the largest VmHWM seen (the kernel's peak, so nothing between samples escapes)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.before_kib = memory_kib(pid)["VmRSS"]
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kib = max(self.peak_kib, memory_kib(self.pid)["VmHWM"])
            self._stop.wait(0.05)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_kib = max(self.peak_kib, memory_kib(self.pid)["VmHWM"])
