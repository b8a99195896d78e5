"""The two line formats of `log_setup`: one line per record whatever a message or a field
holds (a newline, a quote, a forged line), and every field where a collector looks for it."""

from __future__ import annotations

import json
import logging
import sys

from iri_gateway.service.operations.log_setup import TextFormatter, json_formatter

FORGED = 'x\n2026-01-01T00:00:00.000+00:00 INFO iri_gateway.access http.request "forged"'


def record(message: str, **fields: object) -> logging.LogRecord:
    made = logging.LogRecord("iri_gateway.test", logging.INFO, __file__, 1, "%s", (message,), None)
    made.__dict__.update(fields)
    return made


def test_json_lines_stay_one_line_and_keep_every_field() -> None:
    line = json_formatter().format(record(FORGED, event="job.state_changed", job=FORGED))
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["message"] == FORGED and parsed["job"] == FORGED
    assert parsed["event"] == "job.state_changed" and parsed["level"] == "INFO"
    assert parsed["logger"] == "iri_gateway.test" and isinstance(parsed["process"], int)
    assert parsed["time"].endswith("+00:00")
    plain = json.loads(json_formatter().format(record("plain", color_message="\x1b[36m")))
    assert plain["event"] == "log" and "color_message" not in plain


def test_text_lines_escape_what_could_start_a_line_of_their_own() -> None:
    line = TextFormatter().format(record(FORGED, event="x.y", job=FORGED, count=3))
    assert "\n" not in line
    words = line.split(" ")
    assert words[1:4] == ["INFO", "iri_gateway.test", "x.y"]
    assert f"job={json.dumps(FORGED)}" in line and line.endswith("count=3")


def test_a_traceback_in_text_is_marked_on_every_line() -> None:
    try:
        raise ValueError("boom\nINFO forged")
    except ValueError:
        failed = record("it failed")
        failed.exc_info = sys.exc_info()
    first, *rest = TextFormatter().format(failed).split("\n")
    assert " it failed" in first and rest
    assert all(line.startswith("  | ") for line in rest), rest
