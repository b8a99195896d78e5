"""The session-wide check that no token reached a log: when the test session ends, the
output of every `iri-gateway serve` it ran (`serve.kept_logs`) is searched for every token
it issued (`serve.ISSUED_TOKENS`), whole or in part (its first or last 16 characters, in
case a line cut it short); one found fails the session, naming the file and the line (the
copies are then left for a look; otherwise removed).

A pytest plug-in (tests/conftest.py `pytest_plugins`): a hook, not a test, because it must
see the logs of every test, whatever the order they ran in.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import serve

PART = 16
"""How many characters of a token's start or end count as the token (1 in 64^16 by
chance)."""


def leaks(logs: list[Path], tokens: list[str]) -> list[str]:
    """`file:line: token ...` for every line of LOGS that holds a piece of one of TOKENS."""
    pieces = {piece: token for token in tokens for piece in (token[:PART], token[-PART:])}
    found = []
    for log in logs:
        for number, line in enumerate(log.read_text(errors="replace").splitlines(), 1):
            for piece, token in pieces.items():
                if piece in line:
                    found.append(f"{log}:{number}: token {token[:4]}... ({piece!r})")
    return found


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    kept = serve.kept_logs()
    found = leaks(kept, serve.ISSUED_TOKENS)
    if not found:  # the copies are kept only to show a leak
        for folder in {log.parent for log in kept}:
            shutil.rmtree(folder, ignore_errors=True)
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = "tokens issued by the tests were found in serve logs:\n  " + "\n  ".join(found)
    if reporter is not None:
        reporter.write_line(message, red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
