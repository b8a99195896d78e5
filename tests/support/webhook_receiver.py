"""A real HTTP receiver of webhook deliveries for the tests, and waiting on a condition.

`Receiver(port)` listens on 127.0.0.1 only when started (a test may start it late: the
gateway's retries must reach it), keeps every POST (path, headers, body), and answers 204 —
or, while `hold()` is in force, reads the POST and never answers (a receiver that hangs, so
that the gateway's attempt stays in flight). `verified` checks every signature and gives
the events by delivery id (the receiver's deduplication).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from iri_gateway.service.webhooks import signing
from tests.support.serve import free_port


def until(check: Callable[[], bool], timeout: float = 60, what: str = "") -> None:
    """Wait for `check` to hold, looking every 50 ms; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


class Receiver:
    """A real HTTP server on `port` of 127.0.0.1 keeping every POST, started when asked."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.got: list[tuple[str, dict[str, str], bytes]] = []
        self.held: list[str] = []
        """The delivery ids of the POSTs read and left unanswered (`hold`)."""
        self._answering = threading.Event()
        self._answering.set()
        self._server: ThreadingHTTPServer | None = None

    def hold(self) -> None:
        """From now on, read each POST and leave it unanswered (up to 30 s) until `answer`."""
        self._answering.clear()

    def answer(self) -> None:
        self._answering.set()

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if not receiver._answering.is_set():
                    receiver.held.append(self.headers.get("X-IRI-Delivery-ID", ""))
                    receiver._answering.wait(30)
                    return
                receiver.got.append((self.path, dict(self.headers), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._answering.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def verified(self, secrets: dict[str, str]) -> dict[str, dict[str, Any]]:
        """Delivery id -> event, every signature checked with the secret of its path (and
        its time within 5 minutes), the event id header held to the body's."""
        events: dict[str, dict[str, Any]] = {}
        for path, headers, body in self.got:
            assert signing.verify(
                secrets[path], headers["X-IRI-Signature"], body, now=time.time()
            ), (path, headers)
            assert headers["X-IRI-Timestamp"] == headers["X-IRI-Signature"].split(",")[0][2:]
            event = json.loads(body)
            assert headers["X-IRI-Event-ID"] == str(event["id"])
            events.setdefault(headers["X-IRI-Delivery-ID"], event)
        return events
