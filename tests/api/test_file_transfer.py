"""upload and download (issue 16), streamed and confined, on a real `iri-gateway serve`.

The built-in `local` profile grants `/tmp`; the server's data directory lies in /tmp too.
- A 1 GiB file goes up (multipart/form-data, chunked) and comes back down (streamed) with
  the server's memory (VmHWM, the kernel's peak) under 200 MiB; SHA-256 equal on both ends.
- Escape attempts (`..`, an absolute path outside, a link on the way, a link at the target,
  NUL, the gateway's own folder, another user's job folder) change nothing outside; another
  user's files are 404.
- A client that goes away halfway, and an upload over `max_upload_bytes` (a second server
  with a small limit), leave nothing behind; the 413 names the setting.
"""

from __future__ import annotations

import base64
import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from iri_gateway.service.files.remote import reader
from tests.api.transfer_helpers import (
    V2,
    MemoryWatch,
    MiB,
    Payload,
    Served,
    client,
    download_digest,
    file_digest,
    headers,
    leftovers,
    serve_for_two,
    tokens,
    upload_multipart,
)
from tests.support.serve import running_serve

GiB = 1024 * MiB
SMALL_LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve_for_two(tmp_path_factory.mktemp("transfer") / "data") as running:
        yield running


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve_for_two(
        tmp_path_factory.mktemp("transfer-limited") / "data",
        extra_env={"IRI_GATEWAY_MAX_UPLOAD_BYTES": str(SMALL_LIMIT)},
    ) as running:
        yield running


@pytest.fixture
def http(served: Served) -> Iterator[httpx.Client]:
    with client(served, timeout=300) as http:
        yield http


@pytest.fixture
def folder() -> Iterator[Path]:
    """A fresh folder inside the granted /tmp."""
    path = Path("/tmp") / f"iri-transfer-{uuid.uuid4().hex}"
    path.mkdir()
    yield path
    for item in sorted(path.rglob("*"), reverse=True):
        item.unlink() if not item.is_dir() or item.is_symlink() else item.rmdir()
    path.rmdir()


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside every granted root (root could write there if confinement failed)."""
    path = Path("/var/tmp") / f"iri-outside-{uuid.uuid4().hex}"
    path.mkdir()
    (path / "victim").write_text("untouched")
    yield path
    for item in path.iterdir():
        item.unlink()
    path.rmdir()


def upload(
    http: httpx.Client, token: str, path: str, data: bytes = b"payload", resource: str = "local"
) -> httpx.Response:
    return http.post(
        f"{V2}/filesystem/upload/{resource}",
        params={"path": path},
        files={"file": ("f.bin", data)},
        headers=headers(token),
    )


def task_output(http: httpx.Client, token: str, answer: httpx.Response) -> Any:
    assert answer.status_code == 200, answer.text
    task = http.get(f"{V2}/task/{answer.json()['task_id']}", headers=headers(token))
    return task.json()["result"]["output"]


def test_a_1_gib_file_goes_up_and_down_streamed_with_the_server_under_200_mib(
    http: httpx.Client, served: Served, folder: Path
) -> None:
    payload = Payload(GiB)
    target = folder / "big.bin"
    pid = served.serve.process.pid
    with MemoryWatch(pid) as watch:
        started = time.monotonic()
        answer = upload_multipart(http, served.alice, "local", str(target), payload)
        up = time.monotonic() - started
        assert task_output(http, served.alice, answer) == {"path": str(target), "size": GiB}
        started = time.monotonic()
        size, digest = download_digest(http, served.alice, "local", str(target))
        down = time.monotonic() - started
    assert target.stat().st_size == GiB and size == GiB
    assert file_digest(target) == payload.digest == digest
    growth = (watch.peak_kib - watch.before_kib) / 1024
    print(
        f"1 GiB up {up:.1f} s, down {down:.1f} s; server RSS before "
        f"{watch.before_kib / 1024:.0f} MiB, peak {watch.peak_kib / 1024:.0f} MiB"
    )
    assert watch.peak_kib < 200 * 1024, f"peak {watch.peak_kib / 1024:.0f} MiB"
    assert growth < 64, f"the server grew by {growth:.0f} MiB during the transfers"
    assert leftovers(folder) == []


def test_raw_bytes_upload_and_the_download_task_round_trip(
    http: httpx.Client, served: Served, folder: Path
) -> None:
    data = b"\r\n--not-the-boundary\r\n" + bytes(range(256)) * 64
    answer = http.post(
        f"{V2}/filesystem/upload/local",
        params={"path": f"{folder}/raw.bin"},
        content=data,
        headers=headers(served.alice, **{"Content-Type": "application/octet-stream"}),
    )
    assert task_output(http, served.alice, answer)["size"] == len(data)
    multipart = upload(http, served.alice, f"{folder}/form.bin", data)
    assert task_output(http, served.alice, multipart)["size"] == len(data)
    for name in ("raw.bin", "form.bin"):
        assert (folder / name).read_bytes() == data
        got = http.post(
            f"{V2}/filesystem/download/local",
            json={"path": f"{folder}/{name}"},
            headers=headers(served.alice),
        )
        output = task_output(http, served.alice, got)
        assert base64.b64decode(output["content"]) == data
        assert output["file_size"] == len(data)


def test_an_upload_without_a_file_body_is_a_400_naming_file_and_writes_nothing(
    http: httpx.Client, served: Served, folder: Path
) -> None:
    """The official spec documents 400 for invalid request parameters and no 415: a body that
    is neither multipart/form-data nor raw bytes (or none at all) is that 400."""
    for extra in ({}, {"content": b"{}", "headers": {"Content-Type": "application/json"}}):
        answer = http.post(
            f"{V2}/filesystem/upload/local",
            params={"path": f"{folder}/x"},
            **{"headers": headers(served.alice, **extra.pop("headers", {})), **extra},
        )
        assert answer.status_code == 400, answer.text
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert answer.json()["invalid_params"][0]["name"] == "file"
    assert os.listdir(folder) == []


def test_a_download_ignores_fields_beyond_path_as_the_official_schema_allows(
    http: httpx.Client, served: Served, folder: Path
) -> None:
    (folder / "a.txt").write_bytes(b"a")
    answer = http.post(
        f"{V2}/filesystem/download/local",
        json={"path": f"{folder}/a.txt", "something": [None]},
        headers=headers(served.alice),
    )
    assert base64.b64decode(task_output(http, served.alice, answer)["content"]) == b"a"


def test_a_download_task_over_5_mib_says_how_to_stream_it(
    http: httpx.Client, served: Served, folder: Path
) -> None:
    (folder / "six.bin").write_bytes(b"x" * (6 * MiB))
    answer = http.post(
        f"{V2}/filesystem/download/local",
        json={"path": f"{folder}/six.bin"},
        headers=headers(served.alice),
    )
    assert answer.status_code == 422, answer.text
    assert "application/octet-stream" in answer.json()["detail"]
    assert answer.json()["invalid_params"][0]["name"] == "path"


def test_an_upload_never_replaces_and_never_follows_a_link_at_its_target(
    http: httpx.Client, served: Served, folder: Path, outside: Path
) -> None:
    (folder / "kept.txt").write_text("original")
    answer = upload(http, served.alice, f"{folder}/kept.txt")
    assert answer.status_code == 409, answer.text
    assert answer.json()["invalid_params"][0]["name"] == "path"
    assert (folder / "kept.txt").read_text() == "original"
    (folder / "to-victim").symlink_to(outside / "victim")
    (folder / "dangling").symlink_to(outside / "new-file")
    for name in ("to-victim", "dangling"):
        assert upload(http, served.alice, f"{folder}/{name}").status_code == 409
    assert sorted(os.listdir(outside)) == ["victim"]
    assert (outside / "victim").read_text() == "untouched"
    assert leftovers(folder) == []


def test_escapes_change_nothing_outside(
    http: httpx.Client, served: Served, folder: Path, outside: Path
) -> None:
    (folder / "way").symlink_to(outside)
    (folder / "sub").mkdir()
    attempts = [
        f"{outside}/new",
        f"{folder}/../../{outside}/new",
        f"{folder}/sub/../../..{outside}/new",
        f"{folder}/way/new",
        f"{served.data_dir}/planted",
        f"{served.data_dir}/tokens.json",
        "../../var/tmp/new",
    ]
    for path in attempts:
        answer = upload(http, served.alice, path)
        assert answer.status_code == 404, (path, answer.text)
        got = http.post(
            f"{V2}/filesystem/download/local",
            json={"path": path},
            headers=headers(served.alice, Accept="application/octet-stream"),
        )
        assert got.status_code in (404, 422), (path, got.text)
    assert sorted(os.listdir(outside)) == ["victim"]
    assert not (served.data_dir / "planted").exists()
    secret = http.post(
        f"{V2}/filesystem/download/local",
        json={"path": f"{folder}/way/victim"},
        headers=headers(served.alice, Accept="application/octet-stream"),
    )
    assert secret.status_code == 404 and b"untouched" not in secret.content
    for path in (f"{folder}/a\x00b", "x" * 5000):
        answer = upload(http, served.alice, path)
        assert answer.status_code == 422, answer.text
        assert answer.json()["invalid_params"][0]["name"] in ("path", "query.path")
    assert upload(http, served.alice, str(folder)).status_code == 409
    assert upload(http, served.alice, f"{folder}/missing/x").status_code == 404


def test_another_users_job_folder_is_404_both_ways(http: httpx.Client, served: Served) -> None:
    launched = http.post(
        f"{V2}/compute/job/local",
        headers=headers(served.bob),
        json={"executable": "/bin/sh", "arguments": ["-c", "echo bob-secret"]},
    )
    assert launched.status_code == 200, launched.text
    job_id = launched.json()["id"]
    deadline = time.monotonic() + 60
    while True:
        job = http.get(f"{V2}/compute/status/local/{job_id}", headers=headers(served.bob)).json()
        if job["status"]["state"] in ("completed", "failed", "canceled"):
            break
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    directory = job["status"]["meta_data"]["directory"]
    for path in (f"{directory}/stdout.txt", f"{job_id}/stdout.txt"):
        got = http.post(
            f"{V2}/filesystem/download/local",
            json={"path": path},
            headers=headers(served.alice, Accept="application/octet-stream"),
        )
        assert got.status_code == 404 and b"bob-secret" not in got.content
    for path in (f"{directory}/planted", f"{job_id}/planted"):
        assert upload(http, served.alice, path).status_code == 404
    assert not Path(directory, "planted").exists()
    mine = upload(http, served.bob, f"{job_id}/mine.txt", b"bob's own")
    assert mine.status_code == 200, mine.text
    assert Path(directory, "mine.txt").read_bytes() == b"bob's own"


def test_a_client_that_goes_away_halfway_leaves_no_file(served: Served, folder: Path) -> None:
    target = folder / "half.bin"
    host, port = served.serve.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as connection:
        connection.sendall(
            f"POST {V2}/filesystem/upload/local?path={target} HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {served.alice}\r\nX-IRI-Facility-Project: proj1\r\n"
            f"Content-Type: application/octet-stream\r\nContent-Length: {64 * MiB}\r\n\r\n".encode()
        )
        for _ in range(8):
            connection.sendall(b"h" * MiB)
        deadline = time.monotonic() + 30
        while not leftovers(folder):  # the upload is under way
            assert time.monotonic() < deadline, "the upload never started"
            time.sleep(0.05)
    deadline = time.monotonic() + 30
    while leftovers(folder):
        assert time.monotonic() < deadline, f"left behind: {leftovers(folder)}"
        time.sleep(0.05)
    assert not target.exists()


def slow_upload(url: str, token: str, target: Path, size: int, sent: int) -> socket.socket:
    """A raw upload of `size` bytes to `target` of which only `sent` are sent yet (a slow
    client); the caller sends the rest, or goes away."""
    host, port = url.removeprefix("http://").split(":")
    connection = socket.create_connection((host, int(port)))
    connection.sendall(
        f"POST {V2}/filesystem/upload/local?path={target} HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {token}\r\nX-IRI-Facility-Project: proj1\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {size}\r\n\r\n".encode()
        + b"s" * sent
    )
    return connection


def wait_for(condition: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_serve_killed_mid_upload_leaves_a_file_the_next_upload_removes(
    tmp_path_factory: pytest.TempPathFactory, folder: Path
) -> None:
    """kill -9 of the serve mid-upload: its transfer agent (a process of its own) sees its
    input end and removes its temporary file. One left by an agent that could not (named
    for a process that is gone) is removed by the next upload into that folder, while a
    live upload's (named for its agent, a child of the new serve) and files of another
    machine, or unnamed, are kept."""
    data_dir = tmp_path_factory.mktemp("killed") / "data"
    alice = tokens(data_dir, ("alice",))["alice"]
    with running_serve(data_dir) as serve:
        with slow_upload(serve.url, alice, folder / "cut.bin", 16 * MiB, 8 * MiB):
            wait_for(lambda: leftovers(folder), "the upload never started")
            serve.process.kill()
            serve.process.wait(timeout=30)
        killed = serve.process.pid
    wait_for(lambda: not leftovers(folder), "the killed serve's agent left its file")
    stale = f".iri-upload-{reader.writer_host()}-{killed}-0123456789abcdef"
    (folder / stale).write_bytes(b"a killed agent's")
    foreign = [".iri-upload-000000000000-1-0123456789abcdef", ".iri-upload-0123456789abcdef"]
    for name in foreign:
        (folder / name).write_bytes(b"another machine's, or an old name")
    with (
        running_serve(data_dir) as serve,
        httpx.Client(base_url=serve.url, timeout=60) as http,
        slow_upload(serve.url, alice, folder / "live.bin", 2 * MiB, MiB) as live,
    ):

        def ours() -> list[str]:
            return [name for name in leftovers(folder) if name not in foreign]

        wait_for(lambda: len(ours()) == 1 and stale not in ours(), "the stale file stayed")
        [mine] = ours()
        agent = mine.split("-")[3]
        assert f"PPid:\t{serve.process.pid}\n" in Path(f"/proc/{agent}/status").read_text()
        done = upload(http, alice, f"{folder}/other.bin", b"other")
        assert task_output(http, alice, done)["size"] == 5
        assert mine in leftovers(folder), "a live upload's file was removed"
        live.sendall(b"s" * MiB)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += live.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200"), answer
    assert leftovers(folder) == sorted(foreign)
    assert (folder / "live.bin").stat().st_size == 2 * MiB
    assert (folder / "other.bin").read_bytes() == b"other" and not (folder / "cut.bin").exists()


def test_an_upload_over_the_limit_is_413_naming_the_setting_and_leaves_nothing(
    limited: Served, folder: Path
) -> None:
    with client(limited, timeout=60) as http:
        declared = upload(http, limited.alice, f"{folder}/declared", b"d" * (2 * SMALL_LIMIT))
        assert declared.status_code == 413, declared.text
        assert "max_upload_bytes" in declared.json()["detail"]
        assert str(SMALL_LIMIT) in declared.json()["detail"]

        def body() -> Iterator[bytes]:
            for _ in range(4):
                yield b"c" * (SMALL_LIMIT // 2)

        chunked = http.post(
            f"{V2}/filesystem/upload/local",
            params={"path": f"{folder}/chunked"},
            content=body(),
            headers=headers(limited.alice, **{"Content-Type": "application/octet-stream"}),
        )
        assert chunked.status_code == 413, chunked.text
        assert "max_upload_bytes" in chunked.json()["detail"]
        fits = upload(http, limited.alice, f"{folder}/fits", b"f" * 1000)
        assert fits.status_code == 200, fits.text
    assert sorted(os.listdir(folder)) == ["fits"]
