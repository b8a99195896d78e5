"""Parsed profile trees kept in the user's cache folder, so that a command line called in a loop
does not parse the same shipped profiles at every call.

ruamel.yaml's round-trip parser, which the file:line errors need, is pure Python: importing it
and parsing the shipped profiles took about a quarter of `iri-gateway render` (docs/benchmarks.md).
The command line keeps the parsed tree of each shipped profile as JSON, one file per profile
file, in `$XDG_CACHE_HOME/iri-gateway/profile-trees/` (`~/.cache/...` when that is unset), a
folder the user owns.

An entry serves only the very bytes it was parsed from: it records the SHA-256 of the file, so
an edited file is parsed again whatever its modification time says, and the versions of the
gateway and of ruamel.yaml, so an upgrade parses again. Only parsing is skipped: the tree is
validated by the models at every load. Only trees of plain JSON values are kept (strings,
numbers, booleans, null, lists, mappings with string keys); a file with a date, a set, a
non-string key or an anchored boolean (ruamel.yaml's `ScalarBoolean`, an int) would not come
back the same, so it is parsed every time. A cached tree has no line numbers: a profile whose
cached tree fails validation is parsed again, so its errors point at file:line as always.

The cache is never needed for a correct answer: an entry that cannot be read, or does not
match, is a miss, and a folder that cannot be written leaves the next call to parse again.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any

from iri_gateway import __version__

FORMAT = 1
"""Bump when the entry layout or the meaning of a stored tree changes."""


class NotPlain(Exception):
    """A tree holds a value that JSON would not give back as it is."""


def plain_tree(node: Any) -> Any:
    """`node` (a ruamel.yaml round-trip tree) as plain JSON values; NotPlain when it can't be.

    ruamel.yaml's scalar types for strings, ints and floats (block scalars, `0x10`, `1_000`,
    `1.50`) are the same values as the plain ones; anything else is refused.
    """
    from ruamel.yaml.scalarfloat import ScalarFloat
    from ruamel.yaml.scalarint import ScalarInt
    from ruamel.yaml.scalarstring import ScalarString

    def convert(value: Any) -> Any:
        kind = type(value)
        if value is None or kind in (bool, int, str):
            return value
        if kind is float or isinstance(value, ScalarFloat):
            if not math.isfinite(value):
                raise NotPlain(repr(value))
            return float(value)
        if isinstance(value, ScalarInt):
            return int(value)
        if isinstance(value, ScalarString):
            return str(value)
        if isinstance(value, list):
            return [convert(item) for item in value]
        if isinstance(value, dict):
            converted: dict[str, Any] = {}
            for key, item in value.items():
                if type(key) is not str:
                    raise NotPlain(repr(key))
                converted[key] = convert(item)
            return converted
        raise NotPlain(f"{kind.__name__}: {value!r}")

    return convert(node)


@dataclass(frozen=True)
class ProfileTreeCache:
    """Parsed profile trees in `folder`, one JSON file per profile file."""

    folder: Path

    @classmethod
    def for_user(cls) -> ProfileTreeCache | None:
        """The user's cache (XDG base directories); None when the user has no home folder."""
        base = os.environ.get("XDG_CACHE_HOME", "")
        if not os.path.isabs(base):  # the XDG rule: a relative path is ignored
            try:
                base = str(Path.home() / ".cache")
            except RuntimeError:
                return None
        return cls(Path(base) / "iri-gateway" / "profile-trees")

    def get(self, path: Path, data: bytes) -> Any | None:
        """The tree parsed from exactly `data` (the bytes of `path`), or None."""
        try:
            entry = json.loads(self._entry_file(path).read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("key") != self._key(data):
            return None
        return entry.get("tree")

    def put(self, path: Path, data: bytes, tree: Any) -> None:
        """Keep `tree`, parsed from `data` (the bytes of `path`), when it is plain JSON.

        Written to a temporary file and renamed, so a reader never sees half an entry.
        """
        try:
            plain = plain_tree(tree)
        except NotPlain:
            return
        entry = json.dumps({"key": self._key(data), "path": str(path), "tree": plain})
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=".entry-")
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as stream:
                    stream.write(entry)
                os.replace(temporary, self._entry_file(path))
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError:
            return  # the cache is an optimisation: the next call parses the file again

    def _entry_file(self, path: Path) -> Path:
        where = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]
        return self.folder / f"{where}.json"

    def _key(self, data: bytes) -> str:
        return f"{hashlib.sha256(data).hexdigest()} {self._parser}"

    @cached_property
    def _parser(self) -> str:
        return (
            f"format {FORMAT}, iri-gateway {__version__}, "
            f"ruamel.yaml {metadata.version('ruamel.yaml')}"
        )
