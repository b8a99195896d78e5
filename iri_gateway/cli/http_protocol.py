"""The HTTP/1.1 protocol `serve` speaks: uvicorn's httptools protocol, holding requests to the
rule h11 held them to and httptools does not: one Host header.

RFC 9112 (3.2): a server MUST answer 400 to an HTTP/1.1 request without a Host header, or
with more than one. uvicorn's pure-Python h11 parser did; the C parser (llhttp, through
httptools) lets such a request through to the application. Here it is answered as every
other request the parser refuses: 400 "Invalid HTTP request received.", connection closed,
before any of the application's code runs. HTTP/1.0 requests need no Host.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class MissingHost(ValueError):
    """An HTTP/1.1 request without exactly one Host header."""


class HostCheckedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol; an HTTP/1.1 request without exactly one Host is 400."""

    def on_headers_complete(self) -> None:
        if self.parser.get_http_version() == "1.1":
            hosts = sum(1 for name, _ in self.headers if name == b"host")
            if hosts != 1:
                # Raised from the parser's callback, it reaches `data_received` as the
                # parser's own error, which answers 400 and closes the connection.
                raise MissingHost(f"an HTTP/1.1 request has {hosts} Host headers, not 1")
        super().on_headers_complete()
