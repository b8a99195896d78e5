"""The two halves of `service/files/`, held to their shape: what runs where the files are
(`remote`) uses only the standard library and its siblings' public names; both agents are
shipped by the one packer (`shipping`), which carries nothing else of the gateway; and what a
transport offers is asked (`Offers`), never read from its class."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from iri_gateway.service.files import remote, shipping
from iri_gateway.service.files.agents import AgentLimits, Agents
from iri_gateway.service.files.policy import Scope
from iri_gateway.service.files.reads import FileReader, UserFiles
from iri_gateway.service.files.remote import reader, transfer_agent, writer
from iri_gateway.service.files.transfers import UserTransfers
from iri_gateway.transport.base import NotSentError, StreamsNotOfferedError
from iri_gateway.transport.scripted import ScriptedTransport

PACKAGE = Path(remote.__file__).parents[4]
"""The checkout: `iri_gateway/` is in it."""
REMOTE = Path(remote.__file__).parent
SIBLINGS = {path.stem for path in REMOTE.glob("*.py") if path.stem != "__init__"}


def _trees() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text())) for path in sorted(REMOTE.glob("*.py"))]


def test_remote_modules_import_only_the_standard_library_and_each_other() -> None:
    """A login node has nothing of the gateway installed: a program shipped there can import
    only what it carries."""
    wrong = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                top = node.module.split(".")[0]
                if node.module == "iri_gateway.service.files.remote":
                    if any(alias.name not in SIBLINGS for alias in node.names):
                        wrong.append(f"{path.name}:{node.lineno}")
                elif node.module.startswith("iri_gateway.service.files.remote."):
                    if node.module.rsplit(".", 1)[1] not in SIBLINGS:
                        wrong.append(f"{path.name}:{node.lineno}")
                elif top not in sys.stdlib_module_names and top != "__future__":
                    wrong.append(f"{path.name}:{node.lineno} {node.module}")
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] not in sys.stdlib_module_names:
                        wrong.append(f"{path.name}:{node.lineno} {alias.name}")
    assert wrong == []


def test_remote_modules_use_only_each_others_public_names() -> None:
    """No `reader._x` from the writer: what the programs share is public and documented."""
    assert {"reader", "writer", "archiver", "supervisor", "transfer_agent"} <= SIBLINGS
    private = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in SIBLINGS
                and node.attr.startswith("_")
            ):
                private.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "iri_gateway.service.files.remote"
            ):
                private += [
                    f"{path.name}:{node.lineno} {alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_")
                ]
    assert private == []
    shared = ["checked_name", "split_path", "lstat_at", "read_at", "entry_of"]
    assert all(getattr(reader, name).__doc__ for name in shared)
    assert all(getattr(writer, name).__doc__ for name in ("must_exist", "identity", "Budget"))


def test_no_concrete_transport_is_asked_for_outside_transport() -> None:
    """What a transport offers is declared (`Transport.offers`), so no module outside
    `transport/` tests which class a transport is."""
    found, read = [], 0
    for path in sorted(PACKAGE.joinpath("iri_gateway").rglob("*.py")):
        if path.relative_to(PACKAGE).parts[1] == "transport":
            continue
        read += 1
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and len(node.args) == 2
            ):
                classes = [
                    name.id if isinstance(name, ast.Name) else name.attr
                    for name in ast.walk(node.args[1])
                    if isinstance(name, ast.Name | ast.Attribute)
                ]
                if any(name.endswith(("Transport", "Stream")) for name in classes):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert read > 100, "the package was not found"
    assert found == []


def _run(program: str, request: dict[str, object], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """`program` as the gateway runs it on this machine: its own interpreter, `-I -c` (this
    interpreter has the gateway installed: a program must not reach it all the same)."""
    return subprocess.run(
        [sys.executable, "-I", "-c", program],
        input=json.dumps(request).encode() + b"\n",
        capture_output=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def test_the_transfer_agent_is_shipped_by_the_one_packer(tmp_path: Path) -> None:
    """The transfer agent runs from what `shipping` packed (the reader it builds on, then
    it), installed under its own names; its source is sent as it is, not edited."""
    (tmp_path / "data.bin").write_bytes(b"\x00bytes\xff" * 1000)
    program = shipping.program(shipping.TRANSFER_AGENT)
    assert (
        "from iri_gateway.service.files.remote import reader"
        in Path(transfer_agent.__file__).read_text()
    )
    request = {"op": "download", "base": str(tmp_path), "top": [], "rest": ["data.bin"]}
    done = _run(program, {**request, "reserved": []}, tmp_path)
    assert done.returncode == 0, done.stderr
    head, _, body = done.stdout.partition(b"\n")
    assert json.loads(head) == {"ok": True, "size": 7000}
    assert body == b"\x00bytes\xff" * 1000


def test_a_program_carries_only_what_it_packed(tmp_path: Path) -> None:
    """A program that lacks a module its entry imports fails at its start, even where the
    gateway is installed (as under this interpreter): nothing is found outside the program."""
    done = _run(shipping.program((transfer_agent,)), {"op": "download"}, tmp_path)
    assert done.returncode != 0
    assert (
        b"ImportError: cannot import name 'reader' from 'iri_gateway.service.files.remote'"
        in done.stderr
    )


def test_both_programs_fit_one_argument() -> None:
    for modules in (shipping.FILE_AGENT, shipping.TRANSFER_AGENT):
        assert len(shipping.program(modules)) <= shipping.MAX_PROGRAM


def test_streams_are_asked_for_not_assumed(tmp_path: Path) -> None:
    """A transport that offers no streams (a script without a real one behind it) answers
    the features that need them with a NotSentError naming what needed them, before any
    command is sent."""
    script = ScriptedTransport()
    assert not script.offers.streams and not script.offers.as_gateway
    agents = Agents(script, where="a script", limits=AgentLimits())
    with pytest.raises(StreamsNotOfferedError, match="the file agent on a script") as caught:
        agents.run_reporting({"op": "cp"}, lambda counts: None)
    assert isinstance(caught.value, NotSentError)
    scope = Scope(
        roots=(str(tmp_path),), work_root=str(tmp_path / "jobs"), reserved=(), owns_folder=bool
    )
    files = UserFiles(scope, FileReader(agents))
    with pytest.raises(StreamsNotOfferedError, match="file transfers on a script"):
        UserTransfers(files).download(str(tmp_path / "data.bin"))
    assert script.calls == []
