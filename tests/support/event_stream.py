"""A job event stream (`GET /api/v2/compute/events`) read by a test: the frames as they
came, in a thread of its own, parsed by the SSE grammar's simple cases (the server sends one
`data` line per event)."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

EVENTS = "/api/v2/compute/events"


@dataclass
class Frame:
    """One SSE event or comment as it came."""

    event: str | None
    id: int | None
    data: dict[str, Any] | None
    comment: str | None = None
    arrived: float = field(default_factory=time.time)
    """When the test read it (unix time, as the event's `time`)."""


class Reader:
    """A stream read in a thread of its own; its frames go to a queue."""

    def __init__(self, url: str, headers: dict[str, str], params: dict[str, Any]) -> None:
        self.frames: queue.Queue[Frame] = queue.Queue()
        self.received: list[Frame] = []
        """The events `events` has taken from `frames` so far."""
        self.status: int | None = None
        self.opened = threading.Event()
        self._client = httpx.Client(timeout=httpx.Timeout(30, read=60))
        self._thread = threading.Thread(target=self._read, args=(url, headers, params), daemon=True)
        self._thread.start()
        assert self.opened.wait(30), "the stream did not answer"

    def _read(self, url: str, headers: dict[str, str], params: dict[str, Any]) -> None:
        try:
            with self._client.stream("GET", url, headers=headers, params=params) as answer:
                self.status = answer.status_code
                self.opened.set()
                if answer.status_code != 200:
                    answer.read()
                    self.body = answer.text
                    return
                fields: dict[str, str] = {}
                for line in answer.iter_lines():
                    if line.startswith(":"):
                        self.frames.put(Frame(None, None, None, comment=line[1:].strip()))
                    elif line == "":
                        if "data" in fields:
                            self.frames.put(
                                Frame(
                                    fields.get("event"),
                                    int(fields["id"]) if "id" in fields else None,
                                    json.loads(fields["data"]),
                                )
                            )
                        fields = {}
                    else:
                        name, _, value = line.partition(":")
                        fields[name] = value.removeprefix(" ")
        except httpx.HTTPError:
            pass
        finally:
            self.opened.set()

    def events(self, until: Callable[[list[Frame]], bool], timeout: float = 30) -> list[Frame]:
        """Every event (not comment) read since the stream opened, once `until(events)`
        holds for them; fails after `timeout`."""
        got = self.received
        end = time.monotonic() + timeout
        while not until(got):
            left = end - time.monotonic()
            assert left > 0, f"not within {timeout} s; got {[(f.event, f.data) for f in got]}"
            try:
                frame = self.frames.get(timeout=left)
            except queue.Empty:
                continue
            if frame.comment is None:
                got.append(frame)
        return list(got)

    def close(self) -> None:
        self._client.close()
        self._thread.join(timeout=10)


@contextmanager
def event_stream(url: str, token: str, **params: Any) -> Iterator[Reader]:
    """The stream of the serve at `url` for `token`'s user, with `params` (`headers` among
    them: sent as headers) until the block ends."""
    headers = {"Authorization": f"Bearer {token}"}
    headers.update(params.pop("headers", {}))
    reader = Reader(f"{url}{EVENTS}", headers, params)
    try:
        yield reader
    finally:
        reader.close()
