"""The file agent's requests as the gateway sends them, for tests that drive an agent
without a server."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def place(folder: Path, *rest: str) -> dict[str, Any]:
    """A path the agent resolves below `folder` (no reserved names, no top to keep)."""
    return {"base": str(folder), "top": [], "reserved": [], "rest": list(rest)}


def compress_request(folder: Path, source: str, **options: Any) -> dict[str, Any]:
    """A gzip compress of `folder`/SOURCE into `folder`/made.tgz, links not followed;
    `options` add to or replace the request's fields (its bounds, a pattern, progress)."""
    return {
        "op": "compress",
        "path": place(folder, source),
        "target": place(folder, "made.tgz"),
        "compression": "gzip",
        "dereference": False,
        **options,
    }
