"""SSH user certificates against the test cluster's real sshd that trusts only the user CA
(issue 31; `scripts/cluster`: no authorized_keys, `MaxAuthTries 1`, no forwarding, never
root): jobs of two users run as their two accounts with no key file anywhere, certificates
that are expired, for another account or from another CA are refused, the port proxy's
forwarding is refused, and commands under load go on across renewals."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from iri_gateway.models.job import JobState
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.profiles.loading import builtin_profile
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.transport.base import NotSentError, TunnelRefusedError
from iri_gateway.transport.ssh import SshTransport
from iri_gateway.transport.ssh_certificates import CaKeySigner, UserCertificates
from tests.api.test_file_confinement import OPERATIONS, headers
from tests.integration.conftest import ClusterInfo, filled, make_engine, wait_all_final
from tests.support.serve import issue_token, running_serve

RESOURCE = "certs-ssh"
PROFILE = """\
facility: {id: certs, name: Accounts by certificates}
resources:
  - id: certs-ssh
    name: The test cluster through its certificate-only login node
    files: {roots: ["~"]}
    scheduler: {kind: slurm, history: jobcomp, history_window: 300}
    connection:
      mode: ssh
      ssh:
        host: 127.0.0.1
        port: @@SSH_CA_PORT@@
        known_hosts: "@@KNOWN_HOSTS@@"
        certificates: {ca_key: "@@SSH_USER_CA@@", validity: 300}
        user_mapping: {alice: "@@SSH_USER@@", carol: "@@SSH_OTHER_USER@@"}
    queues:
      - {name: all, default: true, max_nodes: 4, max_walltime: 3600}
    nodes: {count: 4, cpu: {arch: x86_64, cores: 2}, memory_gib: 1.9}
    runtimes: {default: podman, podman: {image_forms: [oci]}}
"""


@pytest.fixture
def engine(cluster: ClusterInfo, tmp_path: Path) -> Iterator[Engine]:
    profile = tmp_path / "certs.yaml"
    profile.write_text(filled(PROFILE, cluster), encoding="utf-8")
    made = make_engine(profile, tmp_path)
    yield made
    for record in made.store.unsettled():
        if record.native_id:
            made.cancel(owner=record.owner, job_id=record.id)
    made.close()


def transport(
    cluster: ClusterInfo, account: str, certificates: UserCertificates, attempts: int = 1
) -> SshTransport:
    """A transport to the certificate-only sshd (one attempt: a refusal is seen at once)."""
    return SshTransport(
        host=cluster.ssh_host,
        port=cluster.ssh_ca_port,
        username=account,
        known_hosts=str(cluster.ssh_known_hosts),
        credentials=certificates,
        attempts=attempts,
    )


def certificates_of(
    cluster: ClusterInfo, account: str, *, validity: int = 300, clock: float | None = None
) -> UserCertificates:
    return UserCertificates(
        CaKeySigner(str(cluster.ssh_user_ca)),
        account,
        validity=validity,
        addresses=lambda: ["127.0.0.1/32"],
        clock=(lambda: clock) if clock is not None else time.time,
    )


def test_two_users_jobs_run_as_their_accounts_with_no_key_file_anywhere(
    engine: Engine, cluster: ClusterInfo, tmp_path: Path
) -> None:
    spec = parse_jobspec({"executable": "/bin/sh", "arguments": ["-c", "id -un"]})
    jobs = {
        account: engine.submit(owner=owner, resource_id=RESOURCE, spec=spec).record.id
        for owner, account in (("alice", cluster.ssh_user), ("carol", cluster.ssh_other_user))
    }
    done = wait_all_final(engine, list(jobs.values()))
    for account, job_id in jobs.items():
        record = done[job_id]
        assert record.state == JobState.COMPLETED, record.message
        owner = record.owner
        assert engine.read_output(owner=owner, job_id=job_id) == f"{account}\n"
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not [p for p in written if b"PRIVATE KEY" in p.read_bytes()], "no key file kept"


def test_expired_other_accounts_and_other_cas_certificates_are_refused(
    cluster: ClusterInfo, tmp_path: Path
) -> None:
    alice = cluster.ssh_user
    expired = certificates_of(cluster, alice, validity=120, clock=time.time() - 3600)
    with pytest.raises(NotSentError, match=f"SSH authentication as {alice}@"):
        transport(cluster, alice, expired).run(["true"])
    carols = certificates_of(cluster, cluster.ssh_other_user)
    with pytest.raises(NotSentError, match="SSH authentication"):
        transport(cluster, alice, carols).run(["true"])
    other_ca = tmp_path / "other_ca"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_ca)], check=True)
    stranger = UserCertificates(
        CaKeySigner(str(other_ca)), alice, validity=300, addresses=lambda: ["127.0.0.1/32"]
    )
    with pytest.raises(NotSentError, match="SSH authentication"):
        transport(cluster, alice, stranger).run(["true"])
    elsewhere = UserCertificates(
        CaKeySigner(str(cluster.ssh_user_ca)),
        alice,
        validity=300,
        addresses=lambda: ["192.0.2.1/32"],
    )
    with pytest.raises(NotSentError, match="SSH authentication"):
        transport(cluster, alice, elsewhere).run(["true"])
    good = transport(cluster, alice, certificates_of(cluster, alice))
    result = good.run(["id", "-un"])
    assert (result.exit_code, result.stdout) == (0, f"{alice}\n")
    with pytest.raises(TunnelRefusedError):
        good.tunnel("127.0.0.1", cluster.ssh_port, timeout=5)
    good.close()


def test_commands_under_load_go_on_across_renewals(cluster: ClusterInfo) -> None:
    """Certificates of 8 s: renewed every 6 s, connections retired 2 s before their end;
    eight threads running commands for 20 s, none of them retried once sent (as a
    submission), see none fail: no connection is lost under them while the pool turns over
    (sshd dropped fresh connections so before commands without input read /dev/null)."""
    alice = cluster.ssh_user
    certificates = certificates_of(cluster, alice, validity=8)
    ssh = transport(cluster, alice, certificates)
    failures: list[str] = []
    done = [0]
    lock = threading.Lock()
    stop = time.monotonic() + 20

    def work() -> None:
        while time.monotonic() < stop:
            try:
                result = ssh.run(["echo", "ok"])
                assert result.stdout == "ok\n", result
            except Exception as error:
                with lock:
                    failures.append(repr(error))
                return
            with lock:
                done[0] += 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    ssh.close()
    assert failures == []
    assert certificates.signed >= 3, "renewed while the commands ran"
    assert done[0] > 100


def test_the_ca_key_is_the_gateways_own_file_which_no_user_reaches(
    cluster: ClusterInfo, tmp_path: Path
) -> None:
    """The `local` resource grants /tmp, where the test cluster keeps its CA key: a profile
    naming it as `ca_key` makes it one of the gateway's own files, which the file operations
    never reach (its public half, not the gateway's, stays readable)."""
    profile = tmp_path / "certs.yaml"
    profile.write_text(filled(PROFILE, cluster), encoding="utf-8")
    data = tmp_path / "data"
    token = issue_token(data, "alice", "proj1")
    local = str(builtin_profile("local"))
    args = ("--profiles", local, "--profiles", str(profile))
    with (
        running_serve(data, args=args, log=tmp_path / "serve.log") as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        for operation in OPERATIONS:
            answer = http.post(
                f"/api/v2/filesystem/{operation}/local",
                json={"path": str(cluster.ssh_user_ca)},
                headers=headers(token),
            )
            assert answer.status_code == 404, (operation, answer.text)
            assert "PRIVATE KEY" not in answer.text
        public = http.post(
            "/api/v2/filesystem/view/local",
            json={"path": f"{cluster.ssh_user_ca}.pub"},
            headers=headers(token),
        )
        assert public.status_code == 200, public.text
