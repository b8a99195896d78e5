"""Durations as people type them on the command line: `90`, `90s`, `10m`, `12h`, `2d`."""

from __future__ import annotations

import re

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d{1,9})([smhd]?)")


def duration_seconds(text: str) -> int:
    """Seconds of `text` (a whole number, with an optional unit s, m, h or d: seconds when
    none); ValueError saying what is accepted."""
    found = _DURATION.fullmatch(text.strip().lower())
    if found is None or int(found.group(1)) == 0:
        raise ValueError(
            f"{text[:40]!r} is not a duration: write a whole number of seconds or one with a "
            "unit, such as 90s, 10m, 12h or 2d"
        )
    return int(found.group(1)) * UNITS[found.group(2) or "s"]
