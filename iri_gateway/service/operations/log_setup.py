"""Where the serving process's log lines go and what they look like: stderr, one line each,
JSON (python-json-logger's formatter over the standard `logging` module) or text.

Every line, whoever writes it (the access log, a background action, a library, uvicorn's
error logger), passes through the one handler installed on the root logger here, so a
collector reading stderr sees one format. A value a client controls (a header, a path) is
in a JSON string, so a newline in it is `\\n`, never a second line; the text format quotes
such values the same way.

`configure_logging` is called once per serving process: by `serve` before it builds the
application (and, with workers, in the supervisor), and by each worker's application
factory from the settings in its environment.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, Literal

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

LogFormat = Literal["json", "text"]

PLAIN_EVENT = "log"
"""The `event` of a line written with plain `logging` (a library's, uvicorn's): every line
has an `event`, so a collector can always group by it."""

_FIELDS = ["levelname", "name", "process", "message"]
_RENAMED = {"levelname": "level", "name": "logger"}
_SKIPPED = frozenset(RESERVED_ATTRS) | {"message", "asctime", "taskName", "color_message"}
"""The attributes every `LogRecord` has, and uvicorn's `color_message` (the message again,
with terminal colour codes); the others are the line's own fields (`extra`)."""


def json_formatter() -> logging.Formatter:
    """`{"event", "level", "logger", "process", "message", <fields>, "time"}`: `process` is
    the pid (which worker), `time` RFC 3339 in UTC."""
    return JsonFormatter(
        _FIELDS,
        rename_fields=_RENAMED,
        timestamp="time",
        defaults={"event": PLAIN_EVENT},
        reserved_attrs=sorted(_SKIPPED),
    )


class TextFormatter(logging.Formatter):
    """`TIME LEVEL LOGGER EVENT MESSAGE key=value ...` on one line: the message with its
    control characters escaped, every field's value as JSON (strings quoted, a newline
    `\\n`); a traceback follows on lines that start with `  | `, so no line of it can pass
    for a log line of its own."""

    def format(self, record: logging.LogRecord) -> str:
        fields = fields_of(record)
        event = fields.pop("event", PLAIN_EVENT)
        words = [
            self.formatTime(record),
            record.levelname,
            record.name,
            str(event),
            _one_line(record.getMessage()),
        ]
        words += [f"{key}={json.dumps(value, default=str)}" for key, value in fields.items()]
        line = " ".join(words)
        if record.exc_info:
            trace = self.formatException(record.exc_info)
            line += "".join(f"\n  | {part}" for part in trace.splitlines())
        return line

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """RFC 3339 in UTC, milliseconds, as the JSON lines have it."""
        from datetime import UTC, datetime

        return datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds")


def _one_line(text: str) -> str:
    """TEXT with its control characters (newlines first) escaped as JSON escapes them."""
    if text.isprintable():
        return text
    return json.dumps(text)[1:-1]


_HANDLER_NAME = "iri-gateway"

CHATTY_LIBRARIES = ("alembic", "httpx", "paramiko")
"""Libraries that log routine steps at `info` (each migration step, each HTTP call, each SSH
handshake): held at `warning` unless the level is `debug`, so that `info` is the gateway's
own lines (a request, a background action)."""


def configure_logging(level: str, log_format: LogFormat) -> None:
    """One stderr handler on the root logger, in LOG_FORMAT, passing LEVEL and above (a
    second call replaces it). uvicorn's loggers keep their levels and reach it through the
    root (`serving.stack` gives uvicorn no logging configuration of its own)."""
    formatter = json_formatter() if log_format == "json" else TextFormatter()
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
    for name in ("uvicorn", "uvicorn.error"):
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a record carries beyond the standard ones (its `extra`)."""
    return {k: v for k, v in record.__dict__.items() if k not in _SKIPPED}
