"""A small real HTTP server that speaks the job event stream's wire format (and getJob), for
the SDK's stream tests: it runs in a thread of the test, on a real socket.

It keeps jobs and an event log; `GET /api/v2/compute/events` replays the events after
`Last-Event-ID` (or `last_event_id`), then streams new ones as `change` records them, with
`retry: <ms>` first and a `: keep-alive` comment every `heartbeat` seconds, exactly as
docs/rest-api.md describes the gateway's stream. `GET /api/v2/compute/status/R/J` answers
the job, `POST /api/v2/compute/status/R` the unfinished jobs (getJobs). A test can
make the stream answer 404 (a plain IRI server), cut every connection
(`drop`), or send raw bytes of its choosing (`hostile`). Every request is counted.
`/follow` is a page following the stream with the console's own `static/events.js`, for a
browser test.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

FINAL = {"completed", "failed", "canceled"}
CONSOLE_STATIC = Path(__file__).resolve().parents[2] / "iri_gateway" / "console" / "static"
FOLLOW_PAGE = b"""<!doctype html><meta charset="utf-8"><title>events</title>
<script type="module">
sessionStorage.setItem("iri-gateway.token", "browser-token");
const { followEvents } = await import("/static/events.js");
window.got = []; window.ups = 0; window.downs = [];
window.stopEvents = followEvents({
  onEvent: (type, data) => window.got.push([type, data.id, data.state]),
  onUp: () => { window.ups += 1; },
  onDown: (final) => window.downs.push(final),
});
</script>"""
"""A page that follows the stream with the console's own events.js and keeps what it saw."""


def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait for `condition`, checking every 10 ms; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@dataclass
class EventServerState:
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    has_stream: bool = True
    retry_ms: int = 50
    heartbeat: float = 0.2
    hostile: bytes | None = None
    announce: bool = False
    """Name the stream's live start with an `id:` line beside `retry:`."""
    generation: int = 0
    """Raised by `drop`: every open stream ends at its next look."""
    lock: threading.Condition = field(default_factory=threading.Condition)

    def count(self, path_prefix: str) -> int:
        with self.lock:
            return sum(1 for path, _ in self.requests if path.startswith(path_prefix))

    def exactly(self, path: str) -> int:
        with self.lock:
            return sum(1 for seen, _ in self.requests if seen == path)

    def job_json(self, job_id: str) -> dict[str, Any]:
        job = self.jobs[job_id]
        return {
            "id": job_id,
            "status": {"state": job["state"], "message": job.get("message"), "time": 1.0},
        }

    def add_job(self, job_id: str, state: str = "queued") -> None:
        with self.lock:
            self.jobs[job_id] = {"state": state}

    def change(self, job_id: str, state: str, *, silent: bool = False) -> None:
        """The job moves to `state`; an event records it unless `silent` (a change made
        before any stream could see it)."""
        with self.lock:
            previous = self.jobs[job_id]["state"]
            self.jobs[job_id]["state"] = state
            if not silent:
                number = len(self.events) + 1
                self.events.append(
                    {
                        "id": number,
                        "type": "job",
                        "time": time.time(),
                        "job_id": job_id,
                        "resource_id": "local",
                        "state": state,
                        "previous": previous,
                        "message": "",
                        "job": self.job_json(job_id),
                    }
                )
            self.lock.notify_all()

    def drop(self) -> None:
        with self.lock:
            self.generation += 1
            self.lock.notify_all()


def _handler(state: EventServerState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            with state.lock:
                state.requests.append((url.path, dict(self.headers.items())))
            if url.path == "/api/v2/compute/events" and state.has_stream:
                self._stream(parse_qs(url.query))
                return
            if url.path == "/follow":
                self._answer(200, "text/html", FOLLOW_PAGE)
                return
            if url.path in ("/static/events.js", "/static/api.js"):
                script = (CONSOLE_STATIC / url.path.rsplit("/", 1)[1]).read_bytes()
                self._answer(200, "text/javascript", script)
                return
            parts = url.path.split("/")
            if url.path.startswith("/api/v2/compute/status/") and parts[-1] in state.jobs:
                with state.lock:
                    body = json.dumps(state.job_json(parts[-1])).encode()
                self._answer(200, "application/json", body)
                return
            self._answer(
                404,
                "application/problem+json",
                b'{"status": 404, "title": "Not Found", "detail": "Not Found"}',
            )

        def do_POST(self) -> None:
            """getJobs: the unfinished jobs."""
            url = urlsplit(self.path)
            with state.lock:
                state.requests.append((url.path, dict(self.headers.items())))
                listed = [
                    state.job_json(job_id)
                    for job_id, job in state.jobs.items()
                    if job["state"] not in FINAL
                ]
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer(200, "application/json", json.dumps(listed).encode())

        def _answer(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _stream(self, query: dict[str, list[str]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            if state.hostile is not None:
                self.wfile.write(state.hostile)
                self.wfile.flush()
                return
            resume = self.headers.get("Last-Event-ID") or (query.get("last_event_id") or [""])[0]
            wanted = set(query.get("job_id", []))
            states = set(query.get("state", []))
            with state.lock:
                after = int(resume) if resume.isdigit() else len(state.events)
                generation = state.generation
            start = f"id: {after}\n" if state.announce else ""
            self._send(f"retry: {state.retry_ms}\n{start}\n")
            last_beat = time.monotonic()
            while True:
                with state.lock:
                    fresh = [e for e in state.events if e["id"] > after]
                    if not fresh and state.generation == generation:
                        state.lock.wait(state.heartbeat)
                        fresh = [e for e in state.events if e["id"] > after]
                    if state.generation != generation:
                        return
                for event in fresh:
                    after = event["id"]
                    if wanted and event["job_id"] not in wanted:
                        continue
                    if states and event["state"] not in states:
                        continue
                    data = json.dumps(event)
                    if not self._send(f"id: {event['id']}\nevent: job\ndata: {data}\n\n"):
                        return
                if time.monotonic() - last_beat >= state.heartbeat:
                    last_beat = time.monotonic()
                    if not self._send(": keep-alive\n\n"):
                        return

        def _send(self, text: str) -> bool:
            try:
                self.wfile.write(text.encode())
                self.wfile.flush()
            except OSError:
                return False
            return True

    return Handler


@contextmanager
def event_server() -> Iterator[tuple[str, EventServerState]]:
    """A running server (its base URL) and its state; stopped when the block ends."""
    state = EventServerState()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        state.drop()
        server.shutdown()
        server.server_close()
