"""A real OTLP/HTTP trace receiver for tests: an HTTP server on loopback that takes what an
OpenTelemetry exporter POSTs to `/v1/traces`, decodes the protobuf with `opentelemetry-proto`
(the exporter's own dependency) and keeps the spans, so a test can ask what a real `serve`
process exported."""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

PATH = "/v1/traces"


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, as plain values."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, object]
    service: str
    instance: str
    """The exporting process (`service.instance.id`)."""
    status_code: int


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


class Receiver:
    """The spans received so far, and the raw export requests (to see what was sent)."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.posts: list[bytes] = []
        self.lock = threading.Lock()
        self.url = ""

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received = ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=span.kind,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        service=str(resource.get("service.name")),
                        instance=str(resource.get("service.instance.id")),
                        status_code=span.status.code,
                    )
                    with self.lock:
                        self.spans.append(received)

    def wait_for(
        self, found: Callable[[list[ReceivedSpan]], bool], timeout: float = 30
    ) -> list[ReceivedSpan]:
        """The spans once FOUND holds of them (AssertionError naming them after TIMEOUT)."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = list(self.spans)
            if found(spans):
                return spans
            if time.monotonic() > deadline:
                names = sorted({s.name for s in spans})
                raise AssertionError(f"the spans expected did not arrive; received: {names}")
            time.sleep(0.1)


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            encoding = self.headers.get("Content-Encoding")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            with receiver.lock:
                receiver.posts.append(body)
            if self.path != PATH:
                self.send_response(404)
                self.end_headers()
                return
            receiver.take(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass  # quiet: the test reports what it needs

    return Handler


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver listening on a free port of 127.0.0.1 until the block ends; its `url` is
    the traces endpoint to give an exporter."""
    receiver = Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}{PATH}"
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
