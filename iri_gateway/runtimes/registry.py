"""The container runtimes the gateway knows, by name: the one list everything else reads.

The JobSpec model accepts exactly these names (and lists them in its JSON Schema), a profile
may configure a block for each container runtime among them, local detection asks each one
whether this machine has it, and rendering includes each one's template. Lists come out in
`rank` order, then by name, so the shipped runtimes keep the order they were always listed in.

`add` and `remove` exist for code that brings a runtime from outside this package (a test's own
runtime, an embedding application); add it before profiles are loaded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from iri_gateway.runtimes.base import Runtime

RUNTIME_NAME = re.compile(r"^[a-z][a-z0-9-]*\Z")
"""A runtime name is a YAML key, a JSON enum value and a template file name: kept plain."""


class RuntimeRegistry:
    """Runtimes by name; a second runtime of the same name is an error, never a replacement."""

    def __init__(self, runtimes: Iterable[Runtime] = ()) -> None:
        self._runtimes: dict[str, Runtime] = {}
        self._order: tuple[str, ...] = ()
        for runtime in runtimes:
            self.add(runtime)

    def add(self, runtime: Runtime) -> None:
        """Register `runtime` under its name."""
        name = runtime.name
        if not RUNTIME_NAME.match(name):
            raise ValueError(
                f"runtime name {name!r}: lower-case letters, digits and '-', starting with a letter"
            )
        if name in self._runtimes:
            raise ValueError(f"runtime {name!r} is registered twice")
        self._runtimes[name] = runtime
        self._reorder()

    def remove(self, name: str) -> None:
        """Forget the runtime called `name`."""
        del self._runtimes[name]
        self._reorder()

    def _reorder(self) -> None:
        ranked = sorted(self._runtimes.values(), key=lambda runtime: (runtime.rank, runtime.name))
        self._order = tuple(runtime.name for runtime in ranked)

    def __getitem__(self, name: str) -> Runtime:
        return self._runtimes[name]

    def __contains__(self, name: object) -> bool:
        return name in self._runtimes

    def __iter__(self) -> Iterator[Runtime]:
        return (self._runtimes[name] for name in self._order)

    def names(self) -> tuple[str, ...]:
        """Every runtime's name, bare execution (`none`) included, in listing order."""
        return self._order

    def container_names(self) -> tuple[str, ...]:
        """The names a profile may configure: every runtime but bare execution."""
        return tuple(name for name in self._order if self._runtimes[name].container)
