"""Issue 23 items 3 and 6: a profile may allow setuid bits; `mv` checks every link of the
folder it moves from its new place, as `cp` does: a relative link that stays inside before the
move and would point into another user's root after it is refused (403 naming the link), and
nothing moves. On the `local` resource granting each user `<test folder>/granted/<user>` (the
fixtures of `test_filesystem_write`).
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from iri_gateway.api.app import create_app
from iri_gateway.service.operations.settings import Settings
from tests.api import test_filesystem_write as write_tests
from tests.api.test_filesystem import granted, local_profile
from tests.api.test_filesystem_write import output, refused

pytestmark = pytest.mark.anyio
app = write_tests.app


async def test_a_link_that_would_leave_after_the_move_is_refused(
    client: httpx.AsyncClient, token: str, tmp_path: Path
) -> None:
    home = granted(tmp_path)
    bobs = granted(tmp_path, "bob")
    (bobs / "secret").write_text("BOB\n")
    deep = home / "p" / "q" / "r"
    deep.mkdir(parents=True)
    # From p/q/r, ../../../bob/secret is <home>/bob/secret: inside alice's root.
    (deep / "l").symlink_to("../../../bob/secret")
    # Moved to <home>/q, the same text from q/r is granted/bob/secret: bob's file.
    problem = await refused(
        client, token, "cp", {"path": f"{home}/p/q", "target_path": f"{home}/q"}, 403, "path"
    )
    assert "link" in problem["detail"]
    problem = await refused(
        client, token, "mv", {"path": f"{home}/p/q", "target_path": f"{home}/q"}, 403, "path"
    )
    assert "q/r/l" in problem["detail"] and "../../../bob/secret" in problem["detail"]
    assert os.readlink(home / "p/q/r/l") == "../../../bob/secret", "nothing moved"
    assert not (home / "q").exists()
    # A move that keeps the link inside is made.
    (home / "s" / "t").mkdir(parents=True)
    await output(client, token, "mv", {"path": f"{home}/p/q", "target_path": f"{home}/s/t/q"}, 201)
    assert os.readlink(home / "s/t/q/r/l") == "../../../bob/secret"


async def test_a_profile_may_allow_special_modes(tmp_path: Path) -> None:
    """`files.allow_special_modes: true` reaches the writer: setuid kept (off by default:
    test_hostile_files)."""
    profile = local_profile(
        tmp_path, f'["{tmp_path}/granted/{{user}}"]\n      allow_special_modes: true'
    )
    allowing = create_app(
        Settings(data_dir=tmp_path / "data", profiles=[profile]), run_poller=False
    )
    token = allowing.state.tokens.issue("alice", ["proj1"])
    home = granted(tmp_path)
    (home / "program").write_bytes(b"#!/bin/sh\n")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=allowing), base_url="http://test"
    ) as client:
        await output(client, token, "chmod", {"path": f"{home}/program", "mode": "4755"})
    assert (home / "program").stat().st_mode & 0o7777 == 0o4755
