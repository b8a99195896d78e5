"""Identities mapped to login accounts by rules over their claims (issue 31), on the test
cluster's real sshd and Slurm: two users signed in with JWTs, mapped by two rules over two
different claims to two accounts, whose jobs run as those accounts (`id -un`, the output's
owner and home); a caller no rule maps is refused naming nothing of the rules; the poller
and a cancel act as each job's recorded account without its caller's token."""

from __future__ import annotations

import pwd
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.app import create_app
from iri_gateway.models.job import JobState
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.jobs.poller import Poller
from iri_gateway.service.operations.settings import Settings
from tests.api.test_jwt_auth import AUDIENCE, ISSUER
from tests.api.test_jwt_auth import token as signed
from tests.integration.conftest import ClusterInfo, filled

pytestmark = pytest.mark.anyio

RESOURCE = "rules-ssh"
PROFILE = """\
facility: {id: rules, name: Accounts by rules}
resources:
  - id: rules-ssh
    name: The test cluster through its login node, accounts mapped by rules
    files: {roots: ["~"]}
    scheduler: {kind: slurm, history: jobcomp, history_window: 300}
    connection:
      mode: ssh
      ssh:
        host: 127.0.0.1
        port: @@SSH_PORT@@
        known_hosts: "@@KNOWN_HOSTS@@"
        key_file: "@@SSH_KEY@@"
        account_rules:
          - {claim: email, match: 'alice@lab\\.example', account: "@@SSH_USER@@"}
          - {claim: groups, match: 'cluster-(?P<name>@@SSH_OTHER_USER@@)-users', account: "{name}"}
    queues:
      - {name: all, default: true, max_nodes: 4, max_walltime: 3600}
    nodes: {count: 4, cpu: {arch: x86_64, cores: 2}, memory_gib: 1.9}
    runtimes: {default: podman, podman: {image_forms: [oci]}}
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def gateway(
    cluster: ClusterInfo, jwks_url: str, tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, Engine]]:
    profile = tmp_path / "rules.yaml"
    profile.write_text(filled(PROFILE, cluster), encoding="utf-8")
    settings = Settings(
        data_dir=tmp_path / "data",
        profiles=[profile],
        auth="jwt",
        jwks_url=jwks_url,
        jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE,
        jwt_username_claim="sub",
    )
    app: FastAPI = create_app(settings, run_poller=False)
    engine: Engine = app.state.engine
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=60
    ) as client:
        yield client, engine
    for record in engine.store.unsettled():
        if record.native_id:
            engine.cancel(owner=record.owner, job_id=record.id)
    engine.close()


def bearer(keys: tuple[Any, Any], **claims: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {signed(keys[0], **claims)}"}


ALICE = {"sub": "u-1001", "email": "alice@lab.example", "groups": ["staff"]}
CAROL = {"sub": "u-1002", "email": "carol@elsewhere.example", "groups": ["staff"]}
MALLORY = {"sub": "u-666", "email": "mallory@lab.example.evil", "groups": ["cluster--users"]}


def carol(cluster: ClusterInfo) -> dict[str, Any]:
    return CAROL | {"groups": ["staff", f"cluster-{cluster.ssh_other_user}-users"]}


async def launch(client: httpx.AsyncClient, headers: dict[str, str], command: str) -> str:
    spec = {
        "executable": "/bin/sh",
        "arguments": ["-c", command],
        "name": "whoami",
        "attributes": {"account": "p1"},  # a project the test tokens grant
    }
    answer = await client.post(f"/api/v2/compute/job/{RESOURCE}", json=spec, headers=headers)
    assert answer.status_code == 200, answer.text
    job_id: str = answer.json()["id"]
    return job_id


def run_until_final(engine: Engine, job_ids: list[str], timeout: float = 120) -> None:
    """The real poller, without any caller's token: it must act as each job's account."""
    poller = Poller(engine)
    deadline = time.monotonic() + timeout
    while True:
        poller.cycle(force=True)
        records = [engine.store.get(job_id) for job_id in job_ids]
        if all(r is not None and r.state.final for r in records):
            return
        assert time.monotonic() < deadline, f"not ended in {timeout} s: {records}"
        time.sleep(0.3)


async def test_two_identities_run_as_the_two_accounts_their_claims_map_to(
    gateway: tuple[httpx.AsyncClient, Engine], keys: tuple[Any, Any], cluster: ClusterInfo
) -> None:
    client, engine = gateway
    users = {
        cluster.ssh_user: ("u-1001", bearer(keys, **ALICE)),
        cluster.ssh_other_user: ("u-1002", bearer(keys, **carol(cluster))),
    }
    jobs = {
        account: await launch(client, headers, "id -un") for account, (_, headers) in users.items()
    }
    run_until_final(engine, list(jobs.values()))
    for account, job_id in jobs.items():
        owner = users[account][0]
        record = engine.get(owner=owner, job_id=job_id)
        assert record.state == JobState.COMPLETED, record.message
        assert record.account == account
        assert engine.read_output(owner=owner, job_id=job_id) == f"{account}\n"
        output = Path(engine.output_path(record, "stdout"))
        home = pwd.getpwnam(account)
        assert output.is_relative_to(home.pw_dir), "the job folder is in the account's home"
        assert output.stat().st_uid == home.pw_uid, "written by the account, not another"
    alices = jobs[cluster.ssh_user]
    seen = await client.get(
        f"/api/v2/compute/status/{RESOURCE}/{alices}", headers=users[cluster.ssh_other_user][1]
    )
    assert seen.status_code == 404, "another identity does not see the job"


async def test_an_identity_no_rule_maps_is_refused_naming_nothing_of_the_rules(
    gateway: tuple[httpx.AsyncClient, Engine], keys: tuple[Any, Any], cluster: ClusterInfo
) -> None:
    client, engine = gateway
    spec = {"executable": "/bin/true", "attributes": {"account": "p1"}}
    answer = await client.post(
        f"/api/v2/compute/job/{RESOURCE}", json=spec, headers=bearer(keys, **MALLORY)
    )
    assert answer.status_code == 403, answer.text
    text = answer.text
    assert "u-666" in text and RESOURCE in text
    for secret in (cluster.ssh_user, cluster.ssh_other_user, "example", "cluster-"):
        assert secret not in text
    assert engine.store.find() == [], "nothing recorded"


async def test_a_cancel_reaches_the_job_as_its_account_after_the_rules_stop_mapping_it(
    gateway: tuple[httpx.AsyncClient, Engine], keys: tuple[Any, Any], cluster: ClusterInfo
) -> None:
    """Carol's job runs as her account; her token no longer says the group that mapped
    her (the identity provider changed it): the job is still hers, and her cancel and the
    poller act as the account it runs as."""
    client, engine = gateway
    job_id = await launch(client, bearer(keys, **carol(cluster)), "sleep 300")
    deadline = time.monotonic() + 60
    while engine.get(owner="u-1002", job_id=job_id).native_id is None:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    unmapped = bearer(keys, **CAROL)
    answer = await client.delete(f"/api/v2/compute/cancel/{RESOURCE}/{job_id}", headers=unmapped)
    assert answer.status_code in (200, 202, 204), answer.text
    run_until_final(engine, [job_id])
    record = engine.get(owner="u-1002", job_id=job_id)
    assert record.state == JobState.CANCELED, record.message
    assert record.account == cluster.ssh_other_user
