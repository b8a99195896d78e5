"""A site for the file-task tests (a pytest plug-in, registered in tests/conftest.py): a
profile granting each user a folder, one tokens file for alice and bob, and a real serve
reading them (`gateway`), as tests/api/test_tasks.py, test_task_fairness.py and
test_file_agent.py use it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.api.test_filesystem import local_profile
from tests.support.serve import RunningServe, issue_token, running_serve


def token(tokens: Path, user: str) -> str:
    return issue_token(tokens.parent, user, "proj1", {"IRI_GATEWAY_TOKENS_FILE": str(tokens)})


@contextmanager
def gateway(profile: Path, data: Path, tokens: Path, **env: str) -> Iterator[RunningServe]:
    """A real serve of `profile` with its data in `data`, reading `tokens`; progress written
    every 20 ms (so that polling sees it grow)."""
    with running_serve(
        data,
        args=("--profiles", str(profile)),
        extra_env={
            "IRI_GATEWAY_TOKENS_FILE": str(tokens),
            "IRI_GATEWAY_TASK_PROGRESS_INTERVAL": "0.02",
            **env,
        },
        log=data / "serve.log",
    ) as served:
        yield served


@dataclass(frozen=True)
class Site:
    """The profile granting each user `<folder>/granted/<user>`, a shared tokens file with
    alice's and bob's tokens, and alice's granted folder."""

    profile: Path
    tokens: Path
    alice: str
    bob: str
    home: Path


@pytest.fixture
def site(tmp_path: Path) -> Site:
    profile = local_profile(tmp_path, f'["{tmp_path}/granted/{{user}}"]')
    tokens = tmp_path / "shared" / "tokens.json"
    tokens.parent.mkdir()
    home = tmp_path / "granted" / "alice"
    home.mkdir(parents=True)
    (tmp_path / "granted" / "bob").mkdir()
    return Site(profile, tokens, token(tokens, "alice"), token(tokens, "bob"), home)
