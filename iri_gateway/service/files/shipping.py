"""The one way the programs of `remote` are sent to where the files are: packed.

Why one packer: the file agent and the transfer agent both run where the files are (on this
machine with the gateway's own interpreter, on a login node with its `python3`), both as
`python -I -c PROGRAM`, with nothing of the gateway installed there. A program is the
modules it needs, each installed under its own dotted name (so `from
iri_gateway.service.files.remote import reader` works there exactly as here), then its
entry module's `main()`. Nothing is edited in the sources on the way: a module that imports
a sibling the program does not carry fails at once, where it starts (an `ImportError`), and
`tests/service/files/test_file_layout.py` runs each program where nothing else can be imported.

Each module travels compressed (zlib, base64): a program is one argument of a command,
which over SSH must stay well under the 128 KiB a single argument may hold
(`MAX_PROGRAM`).
"""

from __future__ import annotations

import base64
import zlib
from functools import cache
from pathlib import Path
from types import ModuleType

from iri_gateway.service.files.remote import (
    archiver,
    reader,
    supervisor,
    tarheaders,
    transfer_agent,
    writer,
)

FILE_AGENT: tuple[ModuleType, ...] = (reader, writer, supervisor, tarheaders, archiver)
"""The file agent (reads, changes, archives, under the supervisor's limits): its modules,
each after those it imports, the entry (`archiver.main`) last."""
TRANSFER_AGENT: tuple[ModuleType, ...] = (reader, transfer_agent)
"""The transfer agent (uploads and downloads, streamed): the reader it builds on, then it."""
MAX_PROGRAM = 128 * 1024
"""Most characters a packed program may have: the longest single argument Linux passes to a
command (`MAX_ARG_STRLEN`), which the command line over SSH must respect."""

_BOOTSTRAP = """
import base64, sys, types, zlib
def install(name, packed):
    parent, _, leaf = name.rpartition(".")
    for at in range(len(parent.split("."))):
        package = ".".join(parent.split(".")[: at + 1])
        if package not in sys.modules:
            sys.modules[package] = types.ModuleType(package)
            sys.modules[package].__path__ = []
    module = types.ModuleType(name)
    sys.modules[name] = module
    source = zlib.decompress(base64.b64decode(packed)).decode("utf-8")
    exec(compile(source, name, "exec"), module.__dict__)
    setattr(sys.modules[parent], leaf, module)
    return module
for name, packed in MODULES:
    entry = install(name, packed)
sys.exit(entry.main())
"""


class ProgramTooLongError(RuntimeError):
    """A packed program outgrew `MAX_PROGRAM`: a bug of the gateway's build, found at once."""


@cache
def program(modules: tuple[ModuleType, ...]) -> str:
    """The program that runs `modules[-1].main()` (its return value the exit status) with
    `modules` installed, in their order, under their own names."""
    packed = [
        (
            module.__name__,
            base64.b64encode(zlib.compress(Path(str(module.__file__)).read_bytes(), 9)).decode(
                "ascii"
            ),
        )
        for module in modules
    ]
    text = f"MODULES = {packed!r}\n" + _BOOTSTRAP
    if len(text) > MAX_PROGRAM:
        raise ProgramTooLongError(
            f"the program of {modules[-1].__name__} is {len(text)} characters packed, more "
            f"than the {MAX_PROGRAM} one argument may hold"
        )
    return text
