"""What every transport shares: output decoded in one place, and the scripted test double.

Command output becomes text only in `transport.base.decode_output`, so the local and the SSH
transport give the same text for the same bytes: UTF-8, leniently (a byte that is not UTF-8
becomes U+FFFD instead of failing the command), line endings as they came. The SSH transport
is run against the paramiko stand-in of tests/transport/test_ssh_pool.py.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from iri_gateway.transport.base import (
    CommandResult,
    NotSentError,
    TransportError,
    decode_output,
)
from iri_gateway.transport.local import LocalTransport
from iri_gateway.transport.scripted import (
    Answer,
    Call,
    ScriptedTransport,
    UnscriptedCommandError,
)
from tests.standins.ssh_standin import PoolOnStandin, StandinServer

# Valid UTF-8, a lone continuation byte, a truncated 3-byte sequence, CR LF; and on stderr
# an invalid lead byte.
STDOUT = b"gr\xc3\xbc\xc3\x9fe \x80 \xe2\x82 ok\r\n"
STDERR = b"bad \xff byte\n"
STDOUT_TEXT = "grüße \ufffd \ufffd ok\r\n"
STDERR_TEXT = "bad \ufffd byte\n"


def octal(data: bytes) -> str:
    """`data` as a printf format that prints exactly these bytes."""
    return "".join(f"\\{byte:03o}" for byte in data)


def test_decode_output_is_lenient_utf8_and_keeps_line_endings() -> None:
    assert decode_output(STDOUT) == STDOUT_TEXT
    assert decode_output(STDERR) == STDERR_TEXT
    assert decode_output(b"") == ""


def test_invalid_utf8_through_the_local_transport() -> None:
    result = LocalTransport().run(
        ["sh", "-c", f"printf '{octal(STDOUT)}'; printf '{octal(STDERR)}' >&2"]
    )
    assert result.ok, result.describe()
    assert (result.stdout, result.stderr) == (STDOUT_TEXT, STDERR_TEXT)


def test_invalid_utf8_through_the_ssh_transport() -> None:
    transport = PoolOnStandin(StandinServer())
    result = transport.run(["raw", STDOUT.hex(), STDERR.hex()])
    assert result.ok
    assert (result.stdout, result.stderr) == (STDOUT_TEXT, STDERR_TEXT)


def test_both_transports_give_the_same_text_for_the_same_bytes() -> None:
    local = LocalTransport().run(
        ["sh", "-c", f"printf '{octal(STDOUT)}'; printf '{octal(STDERR)}' >&2"]
    )
    ssh = PoolOnStandin(StandinServer()).run(["raw", STDOUT.hex(), STDERR.hex()])
    assert (local.stdout, local.stderr) == (ssh.stdout, ssh.stderr)


def test_the_local_transport_feeds_stdin_as_utf8() -> None:
    result = LocalTransport().run(["cat"], stdin="grüße\n")
    assert result.stdout == "grüße\n"


def test_a_command_past_its_time_is_ended_with_what_it_started(tmp_path: Path) -> None:
    """The local transport kills the command's whole session at its time-out: a child the
    command left behind holding the output pipe would otherwise keep the wait going until it
    ended by itself (here a minute), and live on."""
    child = tmp_path / "child.pid"
    started = time.monotonic()
    with pytest.raises(TransportError, match="timed out after 1 s"):
        LocalTransport().run(
            ["bash", "-c", f"sleep 60 & echo $! > {child}; exec sleep 60"], timeout=1
        )
    assert time.monotonic() - started < 30  # not the child's minute
    pid = int(child.read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and "Z" not in _state(pid):
        assert time.monotonic() < deadline, f"the command's child {pid} lives on"
        time.sleep(0.05)


def _state(pid: int) -> str:
    """The process's state letter (Z: a zombie, dead but not yet reaped); '' once gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return ""


def test_a_command_without_input_reads_nothing() -> None:
    """No input given: the command reads an empty input, never the server's own."""
    assert LocalTransport().run(["cat"], timeout=10).stdout == ""


# ---- the scripted transport --------------------------------------------------------------------


def test_rules_answer_by_the_first_words_and_every_call_is_recorded() -> None:
    transport = ScriptedTransport()
    transport.on("squeue", reply=Answer(stdout="1|RUNNING\n"))
    transport.on("scontrol", "show", reply=Answer(stderr="no such job\n", exit_code=1))
    ran = transport.run(["squeue", "-h"], timeout=5, idempotent=True)
    shown = transport.run(["scontrol", "show", "job", "7"], stdin="x")
    assert ran == CommandResult(("squeue", "-h"), 0, "1|RUNNING\n", "")
    assert shown == CommandResult(("scontrol", "show", "job", "7"), 1, "", "no such job\n")
    assert transport.calls == [
        Call(("squeue", "-h"), None, 5, True),
        Call(("scontrol", "show", "job", "7"), "x", 60.0, False),
    ]
    assert transport.programs() == ["squeue", "scontrol"]
    with pytest.raises(UnscriptedCommandError, match="scontrol hold 7"):
        transport.run(["scontrol", "hold", "7"])


def test_a_rule_with_times_is_used_up_and_the_next_one_answers() -> None:
    transport = ScriptedTransport()
    transport.on("sbatch", reply=NotSentError("login node down"), times=2)
    transport.on("sbatch", reply=Answer(stdout="42\n"))
    for _ in range(2):
        with pytest.raises(NotSentError, match="login node down"):
            transport.run(["sbatch", "--parsable"])
    assert transport.run(["sbatch", "--parsable"]).stdout == "42\n"
    assert transport.run(["sbatch", "--parsable"]).stdout == "42\n"
    with pytest.raises(ValueError, match="at least 1"):
        transport.on("sbatch", reply=Answer(), times=0)


def test_a_function_reply_gets_the_call_and_otherwise_runs_the_rest_for_real() -> None:
    machine = LocalTransport()

    def shouted(call: Call) -> CommandResult:
        done = call.run_on(machine)
        return CommandResult(done.argv, done.exit_code, done.stdout.upper(), done.stderr)

    transport = ScriptedTransport(otherwise=machine).on("echo", reply=shouted)
    assert transport.name == "local", "named after the transport it passes calls on to"
    assert transport.run(["echo", "hi"]).stdout == "HI\n"
    assert transport.run(["printf", "as is"]).stdout == "as is"
    assert transport.programs() == ["echo", "printf"]


def test_directories_are_recorded_and_made_by_otherwise(tmp_path: Path) -> None:
    alone = ScriptedTransport()
    alone.make_directory("/nowhere/job")
    assert alone.directories == ["/nowhere/job"]
    folder = f"{tmp_path}/a/b"
    passing = ScriptedTransport(otherwise=LocalTransport())
    passing.make_directory(folder)
    assert passing.directories == [folder]
    assert LocalTransport().run(["test", "-d", folder]).ok


def test_an_unscripted_command_is_not_mistaken_for_a_transport_failure() -> None:
    """The engine treats a TransportError as an outage and carries on; a command the test
    did not script must fail the test instead."""
    assert not issubclass(UnscriptedCommandError, TransportError)
    assert issubclass(UnscriptedCommandError, AssertionError)


def test_calls_from_many_threads_are_all_recorded_and_times_kept() -> None:
    transport = ScriptedTransport().on("sbatch", reply=Answer(stdout="first\n"), times=1)
    transport.on("sbatch", reply=Answer(stdout="later\n"))
    answers: list[str] = []
    lock = threading.Lock()

    def submit() -> None:
        out = transport.run(["sbatch"]).stdout
        with lock:
            answers.append(out)

    threads = [threading.Thread(target=submit) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(transport.calls) == 20
    assert sorted(answers) == ["first\n"] + ["later\n"] * 19
