"""The two rich consoles the commands print through, each made on first use.

`render` and `plan` print no table, and importing rich is a noticeable part of a short
command's start-up, so a console (and rich with it) is only made when something is printed
through it. Both follow `sys.stdout` / `sys.stderr` at print time, as rich consoles do.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


@cache
def out() -> Console:
    """Standard output: tables and notes a person reads."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


@cache
def err() -> Console:
    """Standard error: problems, warnings and progress."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)
