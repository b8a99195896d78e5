"""Short-lived SSH user certificates (issue 31), without a login node: what the gateway signs
(a fresh key each time, the account as the only principal, the window, the source address,
no forwarding unless asked), when it renews, and a site's signing program — OpenSSH's own
`ssh-keygen -s` here — whose answers are checked before use."""

from __future__ import annotations

import base64
import stat
import subprocess
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import SSHCertificate, SSHCertificateType

from iri_gateway.transport.ssh_certificates import (
    CaKeySigner,
    CertificateError,
    CommandSigner,
    UserCertificates,
    route_address,
)


@pytest.fixture
def ca_key(tmp_path: Path) -> Path:
    path = tmp_path / "user_ca"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test-ca", "-f", str(path)],
        check=True,
    )
    return path


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def certificate_of(certificates: UserCertificates) -> SSHCertificate:
    """The certificate the key `certificates` gives carries, as `cryptography` reads it."""
    key, _ = certificates.key()
    assert key.public_blob is not None
    line = f"{key.public_blob.key_type} {base64.b64encode(key.public_blob.key_blob).decode()}"
    blob = serialization.load_ssh_public_identity(line.encode())
    assert isinstance(blob, SSHCertificate)
    return blob


def test_a_certificate_names_the_account_only_lasts_minutes_and_permits_no_forwarding(
    ca_key: Path,
) -> None:
    clock = Clock(1_800_000_000.0)
    certificates = UserCertificates(
        CaKeySigner(str(ca_key)),
        "alice",
        validity=600,
        addresses=lambda: ["192.0.2.7/32"],
        clock=clock,
    )
    certificate = certificate_of(certificates)
    assert certificate.type == SSHCertificateType.USER
    assert certificate.valid_principals == [b"alice"]
    assert (certificate.valid_after, certificate.valid_before) == (
        1_800_000_000 - 60,
        1_800_000_000 + 600,
    )
    assert certificate.critical_options == {b"source-address": b"192.0.2.7/32"}
    assert certificate.extensions == {}, "no pty, agent, X11 or port forwarding"
    ca_public = (ca_key.parent / "user_ca.pub").read_text().split()[:2]
    signer = certificate.signature_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    assert signer.decode().split() == ca_public
    certificate.verify_cert_signature()


def test_it_is_renewed_with_a_new_key_when_a_quarter_is_left_and_not_before(
    ca_key: Path,
) -> None:
    clock = Clock(1_800_000_000.0)
    certificates = UserCertificates(
        CaKeySigner(str(ca_key)), "alice", validity=400, addresses=list, clock=clock
    )
    first, ends = certificates.key()
    assert ends == 1_800_000_400
    clock.now += 299  # 101 s left: more than a quarter
    assert certificates.key()[0] is first and certificates.signed == 1
    clock.now += 2  # 99 s left
    second, ends = certificates.key()
    assert certificates.signed == 2 and ends == 1_800_000_701
    assert second.get_base64() != first.get_base64(), "a new key pair, not the same key again"


def test_port_forwarding_is_permitted_only_when_the_site_asks(ca_key: Path) -> None:
    certificates = UserCertificates(
        CaKeySigner(str(ca_key), port_forwarding=True), "alice", validity=600, addresses=list
    )
    certificate = certificate_of(certificates)
    assert certificate.extensions == {b"permit-port-forwarding": b""}
    assert certificate.critical_options == {}, "no addresses given: none written"


def test_a_ca_key_that_cannot_be_used_is_named(tmp_path: Path) -> None:
    with pytest.raises(CertificateError, match="cannot read the SSH certificate authority"):
        CaKeySigner(str(tmp_path / "absent"))
    garbage = tmp_path / "garbage"
    garbage.write_text("not a key\n")
    with pytest.raises(CertificateError, match="is not an unencrypted OpenSSH private key"):
        CaKeySigner(str(garbage))
    locked = tmp_path / "locked"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "pass phrase", "-f", str(locked)], check=True
    )
    with pytest.raises(CertificateError, match="not an unencrypted"):
        CaKeySigner(str(locked))


def signing_program(folder: Path, body: str) -> Path:
    path = folder / "sign"
    path.write_text("#!/bin/bash\nset -eu\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_sites_signing_program_signs_with_ssh_keygen(ca_key: Path, tmp_path: Path) -> None:
    """The program gets the account and seconds as its last arguments and the public key on
    its input; OpenSSH's ssh-keygen signs it."""
    program = signing_program(
        tmp_path,
        'work=$(mktemp -d); cat > "$work/key.pub"\n'
        f'ssh-keygen -q -s {ca_key} -I "gateway-$1" -n "$1" -V "-1m:+${{2}}s" '
        '-O clear "$work/key.pub"\n'
        'cat "$work/key-cert.pub"; rm -r "$work"\n',
    )
    certificates = UserCertificates(
        CommandSigner([str(program)]), "carol", validity=300, addresses=list
    )
    certificate = certificate_of(certificates)
    assert certificate.valid_principals == [b"carol"]
    assert certificate.key_id == b"gateway-carol"
    assert 290 <= certificate.valid_before - certificate.valid_after - 60 <= 310


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("echo 'the CA is down for maintenance' >&2; exit 3", "failed (exit 3): the CA is down"),
        ("echo hello", "not an OpenSSH certificate"),
        ("cat", "a public key, not a certificate"),
        (
            'work=$(mktemp -d); cat > "$work/key.pub"\n'
            'ssh-keygen -q -s @CA@ -I x -n root,"$1" -V +5m "$work/key.pub"\n'
            'cat "$work/key-cert.pub"',
            "names the principals root, carol, not just 'carol'",
        ),
        (
            "ssh-keygen -q -t ed25519 -N '' -f \"$HOME/other-$$\" >/dev/null\n"
            'ssh-keygen -q -s @CA@ -I x -n "$1" -V +5m "$HOME/other-$$.pub"\n'
            'cat "$HOME/other-$$-cert.pub"; rm -f "$HOME"/other-$$*',
            "certified another key",
        ),
        ('sleep 600 & echo $! > "$HOME/sleeper"; wait', "did not answer"),
    ],
    ids=["fails", "garbage", "a-plain-key", "more-principals", "another-key", "hangs"],
)
def test_a_signing_programs_bad_answer_is_refused_in_its_words(
    ca_key: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    body: str,
    reason: str,
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr("iri_gateway.transport.ssh_certificates.SIGN_TIMEOUT", 1.0)
    program = signing_program(tmp_path, body.replace("@CA@", str(ca_key)))
    certificates = UserCertificates(
        CommandSigner([str(program)]), "carol", validity=300, addresses=list
    )
    with pytest.raises(CertificateError) as refused:
        certificates.key()
    assert reason in str(refused.value)
    assert certificates.signed == 0
    sleeper = tmp_path / "sleeper"
    if sleeper.exists():  # what the hanging program started is stopped with it
        assert ended(int(sleeper.read_text()))


def ended(pid: int) -> bool:
    """True once `pid` is gone or a zombie (killed, not yet reaped), within 5 s."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_a_missing_signing_program_is_named(tmp_path: Path) -> None:
    certificates = UserCertificates(
        CommandSigner([str(tmp_path / "nowhere")]), "carol", validity=300, addresses=list
    )
    with pytest.raises(CertificateError, match="is not found"):
        certificates.key()


def test_the_default_source_address_is_the_one_towards_the_login_node() -> None:
    assert route_address("127.0.0.1", 22) == ["127.0.0.1/32"]
    with pytest.raises(CertificateError, match=r"set certificates\.source_addresses"):
        route_address("no-such-host.invalid", 22)
