"""Which login account runs a user's work (issue 31's mapping rules): `user_mapping` first,
then `account_rules` over the caller's claims; a job keeps the account it was submitted as
(the poller, a cancel, the proxy act as it without the caller's claims), and a job recorded
before accounts were is found by its owner's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.service.operations.backends import Backends, NoAccountError
from iri_gateway.service.operations.store import JobStore
from tests.conftest import recorded_job

PROFILE = """\
facility:
  id: demo
  name: Demo facility
resources:
  - id: login
    name: A cluster behind a login node
    scheduler:
      kind: slurm
    queues:
      - name: batch
        default: true
        max_walltime: 7200
    nodes:
      count: 2
      cpu:
        arch: x86_64
        cores: 8
      memory_gib: 64
    connection:
      mode: ssh
      ssh:
        host: login.example.org
        known_hosts: /dev/null
        user_mapping:
          alice: alice-by-name
        account_rules:
          - claim: email
            match: '(?P<name>[a-z]+)@lab\\.example\\.org'
            account: '{name}'
          - claim: groups
            match: 'project-(?P<p>[a-z0-9]+)'
            account: 'svc-{p}'
    runtimes:
      default: podman
      podman:
        image_forms: [oci]
"""


@pytest.fixture
def login(tmp_path: Path) -> LoadedResource:
    path = tmp_path / "site.yaml"
    path.write_text(PROFILE, encoding="utf-8")
    return ProfileRegistry.from_files([path]).get("login")


def test_the_name_mapping_comes_first_then_the_rules_in_order(
    login: LoadedResource, tmp_path: Path
) -> None:
    backends = Backends(tmp_path)
    by_rule = {"email": "alice@lab.example.org", "groups": ["project-x1"]}
    assert backends.account(login, "alice", by_rule) == "alice-by-name"
    assert backends.account(login, "a-sub", by_rule) == "alice"
    assert (
        backends.account(
            login, "b-sub", {"email": "b@elsewhere.org", "groups": ["staff", "project-q7"]}
        )
        == "svc-q7"
    )


def test_no_mapping_and_no_rule_refuses_naming_neither(
    login: LoadedResource, tmp_path: Path
) -> None:
    with pytest.raises(NoAccountError) as refused:
        Backends(tmp_path).account(login, "mallory", {"email": "mallory@evil.example"})
    message = str(refused.value)
    assert "'mallory' has no account on login" in message
    for secret in ("alice", "lab.example.org", "project-", "svc-"):
        assert secret not in message, "the refusal names no one mapped and no rule"


def test_a_rule_cannot_make_root_nor_a_name_with_odd_characters(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    strict = "'(?P<name>[a-z]+)@lab\\.example\\.org'"
    assert strict in PROFILE
    path.write_text(PROFILE.replace(strict, "'(?P<name>.+)@lab'"), encoding="utf-8")
    login = ProfileRegistry.from_files([path]).get("login")
    backends = Backends(tmp_path)
    for sneaky in ("root@lab", "a b@lab", "x;rm -rf /@lab", "../../etc@lab", "-oProxy@lab"):
        with pytest.raises(NoAccountError):
            backends.account(login, "m", {"email": sneaky})
    assert backends.account(login, "m", {"email": "carol@lab"}) == "carol"


def test_a_job_keeps_the_account_it_was_submitted_as(login: LoadedResource, tmp_path: Path) -> None:
    """The poller has no caller's claims: it reads the job's recorded account, even after
    the caller's identity (or the site's rules) would map them elsewhere."""
    store = JobStore(f"sqlite:///{tmp_path}/jobs.db")
    backends = Backends(tmp_path)
    job = recorded_job(store, owner="a-sub", resource_id="login", account="alice")
    read = store.get(job.id)
    assert read is not None and read.account == "alice"
    assert [e.account for e in store.poll_entries(["login"])] == ["alice"]
    assert backends.job_account(login, read) == "alice"
    assert backends.for_job(login, read).account == "alice"
    assert backends.for_job(login, read) is backends.for_account(login, "alice"), "one per pair"


def test_a_job_recorded_before_accounts_is_found_by_its_owners_name(
    login: LoadedResource, tmp_path: Path
) -> None:
    store = JobStore(f"sqlite:///{tmp_path}/jobs.db")
    backends = Backends(tmp_path)
    old = store.get(recorded_job(store, owner="alice", resource_id="login").id)
    assert old is not None and old.account is None
    assert backends.job_account(login, old) == "alice-by-name"
    stranger = store.get(recorded_job(store, owner="nobody", resource_id="login").id)
    assert stranger is not None
    with pytest.raises(NoAccountError):
        backends.job_account(login, stranger)
