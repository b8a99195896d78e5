"""One refusal type for file work, and one mapping of it to HTTP problems: every word a remote
program answers is a `Refusal`; one condition has one name; each operation's problems keep
the words clients have always seen."""

from __future__ import annotations

import ast
import errno
from pathlib import Path

import pytest

from iri_gateway.api.plumbing.problems import FileOperation, file_problem
from iri_gateway.service.files import remote
from iri_gateway.service.files.refusals import FileRefusedError, Refusal, UnknownRefusalError
from iri_gateway.service.files.remote import writer

INTERNAL = {"died", "bad_header"}
"""Words that never reach the gateway's side as refusals: a worker killed from outside (an
`AgentError`, transient) and the tar scanner's, which the archiver words as `bad_member`."""


def _words(node: ast.expr) -> set[str]:
    """The words an expression can be: a string, or either branch of a conditional one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _words(node.body) | _words(node.orelse)
    return set()


def _answered_words() -> set[str]:
    """The refusal words the remote programs can answer: the first argument of every
    `Refused(...)`-like call, and the words a refusal's `kind` is chosen from."""
    words: set[str] = set()
    for path in Path(remote.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and node.args
                and ast.unparse(node.func).endswith(("Refused", "_refused"))
            ):
                words |= _words(node.args[0])
            if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "kind" for target in node.targets
            ):
                words |= _words(node.value)
    return words


def test_every_word_the_remote_programs_answer_is_a_refusal() -> None:
    words = _answered_words()
    assert {"not_found", "denied", "write_failed", "window", "limit", "canceled"} <= words
    assert words - INTERNAL - set(Refusal) == set()


def test_the_operating_systems_refusal_has_one_name() -> None:
    """The writer and the transfer agent call it the same: `denied` (once also `permission`)."""
    for code in (errno.EACCES, errno.EPERM, errno.EROFS):
        refused = writer.os_refusal(OSError(code, "no"), "path")
        assert Refusal(refused.kind) is Refusal.DENIED
    assert "permission" not in set(Refusal)


def test_an_unknown_word_is_the_gateways_bug_not_a_guess() -> None:
    with pytest.raises(UnknownRefusalError, match="'permission'"):
        FileRefusedError.answered({"ok": False, "error": "permission", "detail": "x"})
    said = FileRefusedError.answered({"ok": False, "error": "window", "field": "lines"})
    assert (said.kind, said.detail, said.field) == (Refusal.WINDOW, "", "lines")


@pytest.mark.parametrize("operation", list(FileOperation))
def test_every_refusal_has_a_problem_in_every_operation(operation: FileOperation) -> None:
    for kind in Refusal:
        problem = file_problem(
            FileRefusedError(kind, "why"),
            operation=operation,
            resource_id="r",
            asked={"path": "/p"},
        )
        assert 400 <= problem.status < 600 and problem.title and problem.detail, kind


def test_a_read_tells_only_its_own_refusals_apart() -> None:
    """A reserved or changed file reads as a missing one: the one 404, same words."""
    missing, reserved = (
        file_problem(
            FileRefusedError(kind, "the gateway's own"),
            operation=FileOperation.READ,
            resource_id="r",
            asked={"path": "/p"},
        )
        for kind in (Refusal.NOT_FOUND, Refusal.RESERVED)
    )
    assert (missing.status, missing.detail) == (reserved.status, reserved.detail)
    assert missing.detail == (
        "'/p' is not a file or directory you may read on 'r' (the folders of your jobs and "
        "the roots granted to you)"
    )


def test_the_words_of_each_operation() -> None:
    """Details as clients have always seen them (tests/api check many more end to end)."""
    asked = {"path": "/a", "target_path": "/b"}

    def said(kind: Refusal, operation: FileOperation, detail: str = "", field: str = "") -> str:
        error = FileRefusedError(kind, detail, field)
        problem = file_problem(error, operation=operation, resource_id="r", asked=asked)
        return f"{problem.status} {problem.title}: {problem.detail} {problem.invalid_params}"

    assert said(Refusal.DENIED, FileOperation.WRITE, "Permission denied") == (
        "403 Forbidden: path '/a': the operating system refused it to your account: "
        "Permission denied [{'name': 'path', 'reason': 'the operating system refused it to "
        "your account: Permission denied'}]"
    )
    assert said(Refusal.DENIED, FileOperation.TRANSFER, "Permission denied") == (
        "403 Forbidden: the operating system does not let your account create '/a' on 'r': "
        "Permission denied []"
    )
    assert said(Refusal.EXISTS, FileOperation.WRITE, field="target_path") == (
        "409 Conflict: target_path '/b': already exists (nothing is overwritten) "
        "[{'name': 'target_path', 'reason': 'already exists (nothing is overwritten)'}]"
    )
    assert said(Refusal.NOT_FOUND, FileOperation.TRANSFER) == (
        "404 Not Found: '/a' is not a file or folder you may use on 'r' (the folders of your "
        "jobs and the roots granted to you) []"
    )
    assert said(Refusal.NOT_FOUND, FileOperation.WRITE, field="target_path") == (
        "404 Not Found: '/b' is not a file or directory you may use on 'r' (the folders of "
        "your jobs and the roots granted to you) [{'name': 'target_path', 'reason': 'not "
        "found'}]"
    )
    assert said(Refusal.DIRECTORY, FileOperation.READ) == (
        "400 Bad Request: '/a' is a directory [{'name': 'path', 'reason': 'is a directory'}]"
    )


def test_a_refusal_in_words_about_its_path() -> None:
    """What a job's output that cannot be read says (the engine passes the refusal on)."""
    assert FileRefusedError(Refusal.DIRECTORY).of_the_path() == "it is a directory"
    assert FileRefusedError(Refusal.NOT_FOUND).of_the_path() == (
        "it does not exist (yet) or is not where you may read"
    )
    assert FileRefusedError(Refusal.LIMIT, "cpu").of_the_path() == "limit"
