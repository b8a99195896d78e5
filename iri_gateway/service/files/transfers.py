"""The gateway's side of uploads and downloads: place the path (`policy`, as reads do), then
stream the bytes through the agent (`transfer_agent`) where the files are, never holding a
whole file.

The agent never runs in the serving process: on this machine it runs as the gateway's account
with the gateway's own interpreter, over SSH on the login node as the user's mapped account
with `python3`, in both cases `-I -c` with its program (`shipping.TRANSFER_AGENT`: the
reader it builds on, then it), the bytes streamed through its input and output in frames,
with the pipe's or the channel's window as backpressure. A refusal comes before any byte of
the body is taken, so a refused upload reads nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from typing import Any, Protocol

from iri_gateway.service.files import shipping
from iri_gateway.service.files.policy import path_problem
from iri_gateway.service.files.reads import UserFiles
from iri_gateway.service.files.refusals import FileRefusedError, Refusal
from iri_gateway.service.files.remote import transfer_agent
from iri_gateway.transport.base import Stream, TransportError, streaming

STREAM_TIMEOUT = 120.0
"""Seconds one step of a transfer (a frame sent, a chunk received) may take."""


class Upload(Protocol):
    """A file being written: `write` chunks, then `commit` (its size) or `abort`."""

    def write(self, data: bytes) -> None: ...
    def commit(self) -> int: ...
    def abort(self) -> None: ...


@dataclass
class Download:
    """A file being read: its `size` and its `chunks`; `close` when done (idempotent)."""

    size: int
    chunks: Iterator[bytes]
    closer: ExitStack

    def close(self) -> None:
        self.closer.close()


class _RemoteUpload:
    """The agent on the login node, fed frames; closing the stream early aborts it."""

    def __init__(
        self, opened: AbstractContextManager[Stream], request: dict[str, Any], where: str
    ) -> None:
        self._closer = ExitStack()
        self._stream = self._closer.enter_context(opened)
        self._where = where
        try:
            self._stream.send(json.dumps(request).encode() + b"\n")
            answer = _answer(self._stream, where)
            if not answer["ok"]:
                raise FileRefusedError.answered(answer)
        except BaseException:
            self._closer.close()
            raise

    def write(self, data: bytes) -> None:
        try:
            self._stream.send(b"%d\n" % len(data))
            self._stream.send(data)
        except BaseException:
            self.abort()
            raise

    def commit(self) -> int:
        try:
            self._stream.send(b"0\n")
            self._stream.end_input()
            answer = _answer(self._stream, self._where)
            if not answer["ok"]:
                raise FileRefusedError.answered(answer)
            return int(answer["result"]["size"])
        finally:
            self._closer.close()

    def abort(self) -> None:
        self._closer.close()


def _answer(stream: Stream, where: str) -> dict[str, Any]:
    """The agent's next JSON answer line (lines a login script may print before it are
    skipped); TransportError when the output ends first."""
    while True:
        line = stream.readline()
        if not line:
            stderr = stream.stderr().strip()
            if "python3" in stderr and "not found" in stderr:
                raise TransportError(
                    f"file transfers on {where} need python3 (3.9 or later) "
                    f"on the login node: {stderr[-300:]}"
                )
            raise TransportError(
                f"the file transfer agent on {where} ended without an answer: {stderr[-300:]!r}"
            )
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        if isinstance(answer, dict) and "ok" in answer:
            return answer


def _remote_chunks(stream: Stream, size: int) -> Iterator[bytes]:
    left = size
    while left > 0:
        data = stream.read(min(transfer_agent.CHUNK, left))
        if not data:
            raise TransportError(
                "the download ended early (the file shrank, or the login node went away)"
            )
        left -= len(data)
        yield data


@dataclass(frozen=True)
class UserTransfers:
    """Uploads and downloads for one user on one resource, confined as their reads are."""

    files: UserFiles

    def _request(self, operation: str, path: str) -> dict[str, Any]:
        problem = path_problem(path)
        if problem is not None:
            raise FileRefusedError(Refusal.INVALID_PATH, problem, "path")
        anchor = self.files.scope.locate(path)
        if anchor is None:
            raise FileRefusedError(Refusal.NOT_FOUND)
        return {"op": operation, **anchor.spec()}

    def _stream(self) -> AbstractContextManager[Stream]:
        transport = streaming(
            self.files.reader.transport, f"file transfers on {self.files.reader.where}"
        )
        return transport.stream(
            [transport.python, "-I", "-c", shipping.program(shipping.TRANSFER_AGENT)],
            timeout=STREAM_TIMEOUT,
        )

    def upload(self, path: str) -> Upload:
        """A new file at `path`, ready for its bytes; FileRefusedError when it cannot be."""
        request = self._request("upload", path)
        return _RemoteUpload(self._stream(), request, self.files.reader.where)

    def download(self, path: str) -> Download:
        """The file at `path`, opened; FileRefusedError when it may not be read."""
        request = self._request("download", path)
        closer = ExitStack()
        try:
            stream = closer.enter_context(self._stream())
            stream.send(json.dumps(request).encode() + b"\n")
            stream.end_input()
            answer = _answer(stream, self.files.reader.where)
            if not answer["ok"]:
                raise FileRefusedError.answered(answer)
        except BaseException:
            closer.close()
            raise
        size = int(answer["size"])
        return Download(size, _remote_chunks(stream, size), closer)
