"""Server-Sent Events, read as the WHATWG HTML standard parses them (section 9.2.6), bounded.

`SSEDecoder` turns the text of a `text/event-stream` body, in whatever pieces the network
delivers it, into `ServerSentEvent`s: lines end with CRLF, LF or CR (a CR at the end of one
piece and an LF at the start of the next are one line end); a line starting with `:` is a
comment (the gateway's heartbeat); `data` lines join with LF; `event` names the type;
`id` sets the last event id (kept from event to event until the server sends another; an id
holding NUL is ignored, as the standard says); `retry` (ASCII digits only) sets the
reconnection delay; an empty line dispatches the event, one without data is dropped; an
unknown field is ignored.

Bounds, so that a broken or hostile server cannot make the client hold memory without end:
a line longer than `max_line` characters (a stream that never sends a newline, too) and an
event whose data grows past `max_event` characters raise `StreamTooLarge` instead.
The gateway's own events are one JSON line of a job as getJob shows it: far below both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LINE = 1024 * 1024
"""The longest line the decoder keeps, in characters (1 Mi)."""
MAX_EVENT = 4 * 1024 * 1024
"""The most data one event may carry, in characters (4 Mi)."""
_LINE_END = re.compile(r"\r\n|\r|\n")


class StreamTooLarge(ValueError):
    """The stream broke a bound: a line or an event larger than the decoder keeps."""


@dataclass(frozen=True)
class ServerSentEvent:
    """One dispatched event: its type (`message` unless named), data, and the last event id
    as it stood when the event was dispatched ("" when the server never sent one)."""

    event: str
    data: str
    last_event_id: str


class SSEDecoder:
    """The event-stream parser's state for one connection (its last event id, the
    reconnection time and the event being built), fed text as it arrives."""

    def __init__(
        self, *, max_line: int = MAX_LINE, max_event: int = MAX_EVENT, last_event_id: str = ""
    ) -> None:
        self.max_line = max_line
        self.max_event = max_event
        self.last_event_id = last_event_id
        self.retry: int | None = None
        """The reconnection time the server asked for, in milliseconds (None until it does)."""
        self._pending = ""
        self._skip_lf = False
        self._started = False
        self._data: list[str] = []
        self._data_size = 0
        self._event = ""
        self._id_buffer = last_event_id

    def feed(self, text: str) -> list[ServerSentEvent]:
        """The events completed by `text` (the next piece of the body), in order."""
        if not text:
            return []
        if self._skip_lf and text.startswith("\n"):
            text = text[1:]
        self._skip_lf = False
        if not self._started:
            self._started = True
            text = text.removeprefix("\ufeff")
        events: list[ServerSentEvent] = []
        start = 0
        for end in _LINE_END.finditer(text):
            line = self._pending + text[start : end.start()]
            self._pending = ""
            self._check_line(len(line))
            event = self._line(line)
            if event is not None:
                events.append(event)
            start = end.end()
        if text.endswith("\r"):
            self._skip_lf = True
        rest = text[start:]
        if rest:
            self._check_line(len(self._pending) + len(rest))
            self._pending += rest
        return events

    def _check_line(self, length: int) -> None:
        if length > self.max_line:
            raise StreamTooLarge(
                f"the event stream sent a line longer than {self.max_line} characters"
            )

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data_size += len(value) + 1
            if self._data_size > self.max_event:
                raise StreamTooLarge(
                    f"the event stream sent an event with more than {self.max_event} "
                    "characters of data"
                )
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id_buffer = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        self.last_event_id = self._id_buffer
        data, event = self._data, self._event
        self._data, self._data_size, self._event = [], 0, ""
        if not data:
            return None
        return ServerSentEvent(event or "message", "\n".join(data), self.last_event_id)
