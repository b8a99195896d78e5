"""A streaming reader of one part of a `multipart/form-data` body (RFC 7578), for uploads.

Starlette's form parser keeps every file in a spooled temporary file on the server before the
route sees it: a 1 GiB upload would be written twice, once where the gateway keeps its
temporaries. This reader instead hands over the bytes of the one wanted part as they arrive,
so they go straight into the file being made; everything it holds at once is one chunk plus
a boundary's length (and at most `MAX_HEADERS` bytes of a part's headers).
"""

from __future__ import annotations

MAX_HEADERS = 16 * 1024
"""Most bytes of one part's headers."""


class MultipartError(ValueError):
    """The body is not the multipart/form-data it says it is (the message says how)."""


def boundary_of(content_type: str) -> bytes | None:
    """The boundary of a `multipart/form-data` content type; None for any other type."""
    kind, _, parameters = content_type.partition(";")
    if kind.strip().lower() != "multipart/form-data":
        return None
    for parameter in parameters.split(";"):
        name, _, value = parameter.strip().partition("=")
        if name.strip().lower() == "boundary":
            value = value.strip().strip('"')
            if 0 < len(value) <= 70:
                return value.encode("latin-1", "replace")
    raise MultipartError(
        "the multipart/form-data content type names no boundary (1 to 70 characters)"
    )


def _field_name(headers: bytes) -> str | None:
    for line in headers.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() != b"content-disposition":
            continue
        for parameter in value.decode("utf-8", "replace").split(";")[1:]:
            key, _, text = parameter.strip().partition("=")
            if key.strip().lower() == "name":
                return text.strip().strip('"')
    return None


class FilePart:
    """Feeds on the body's chunks and gives back the bytes of the part named `field`."""

    def __init__(self, boundary: bytes, field: str) -> None:
        self._delimiter = b"\r\n--" + boundary
        self._buffer = bytearray(b"\r\n")  # the body's first delimiter has no line break
        self._field = field
        self._state = "preamble"
        self._wanted = False
        self.found = False
        """True once the wanted part was read whole."""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The wanted part's bytes found in `chunk` (MultipartError on a malformed body)."""
        self._buffer += chunk
        out: list[bytes] = []
        while True:
            if self._state in ("preamble", "body"):
                at = self._buffer.find(self._delimiter)
                if at < 0:
                    keep = len(self._delimiter) - 1
                    if self._wanted and len(self._buffer) > keep:
                        out.append(bytes(self._buffer[:-keep]))
                    if len(self._buffer) > keep:
                        del self._buffer[:-keep]
                    return out
                if self._wanted and at:
                    out.append(bytes(self._buffer[:at]))
                if self._wanted:
                    self.found, self._wanted = True, False
                del self._buffer[: at + len(self._delimiter)]
                self._state = "after"
            elif self._state == "after":
                if len(self._buffer) < 2:
                    return out
                mark = bytes(self._buffer[:2])
                del self._buffer[:2]
                if mark == b"--":
                    self._state = "end"
                elif mark == b"\r\n":
                    self._state = "headers"
                else:
                    raise MultipartError("a boundary is followed by neither a line break nor '--'")
            elif self._state == "headers":
                at = self._buffer.find(b"\r\n\r\n")
                if at < 0:
                    if len(self._buffer) > MAX_HEADERS:
                        raise MultipartError(
                            f"a part's headers are longer than {MAX_HEADERS} bytes"
                        )
                    return out
                name = _field_name(bytes(self._buffer[:at]))
                del self._buffer[: at + 4]
                if name == self._field:
                    if self.found:
                        raise MultipartError(
                            f"the body has more than one {self._field!r} part; give one"
                        )
                    self._wanted = True
                self._state = "body"
            else:  # "end": the epilogue is ignored
                self._buffer.clear()
                return out

    def close(self) -> None:
        """MultipartError unless the body ended properly with the wanted part in it."""
        if self._state != "end":
            raise MultipartError("the multipart body ended before its closing boundary")
        if not self.found:
            raise MultipartError(f"the multipart body has no {self._field!r} part")
