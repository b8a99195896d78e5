"""`connection.ssh.certificates` in a profile: one signer (a CA key or a site's program), a
validity of minutes to a day, source addresses that are addresses, and never beside a
long-lived `key_file`; each refusal names the field and the file's line."""

from __future__ import annotations

from pathlib import Path

import pytest

from iri_gateway.errors import ProfileError
from iri_gateway.profiles.loading import ProfileRegistry
from tests.service.operations.test_job_accounts import PROFILE

ANCHOR = "        known_hosts: /dev/null\n"


def load(tmp_path: Path, block: str) -> ProfileRegistry:
    assert ANCHOR in PROFILE
    path = tmp_path / "site.yaml"
    path.write_text(PROFILE.replace(ANCHOR, ANCHOR + block), encoding="utf-8")
    return ProfileRegistry.from_files([path])


def test_a_ca_key_or_a_signing_program_is_taken(tmp_path: Path) -> None:
    loaded = load(tmp_path, "        certificates: {ca_key: /etc/gw/user_ca, validity: 300}\n")
    ssh = loaded.get("login").resource.connection.ssh
    assert ssh is not None and ssh.certificates is not None
    assert (ssh.certificates.ca_key, ssh.certificates.validity) == ("/etc/gw/user_ca", 300)
    assert ssh.certificates.port_forwarding is False, "no forwarding unless the site asks"
    assert ssh.gateway_files() == ["/dev/null", "/etc/gw/user_ca"], "the CA key is reserved"
    loaded = load(tmp_path, "        certificates: {sign_command: [/usr/bin/sign, --quiet]}\n")
    ssh = loaded.get("login").resource.connection.ssh
    assert ssh is not None and ssh.certificates is not None
    assert ssh.certificates.sign_command == ["/usr/bin/sign", "--quiet"]
    assert ssh.certificates.validity == 600


@pytest.mark.parametrize(
    ("block", "reason"),
    [
        ("        certificates: {validity: 300}\n", "exactly one of ca_key"),
        (
            "        certificates: {ca_key: /k, sign_command: [/s]}\n",
            "exactly one of ca_key",
        ),
        ("        certificates: {ca_key: /k, validity: 30}\n", "greater than or equal to 60"),
        ("        certificates: {ca_key: /k, validity: 864000}\n", "less than or equal to 86400"),
        (
            "        certificates: {ca_key: /k, source_addresses: [10.0.0.0/33]}\n",
            "'10.0.0.0/33' is not an address or network",
        ),
        (
            "        key_file: /root/.ssh/id_ed25519\n        certificates: {ca_key: /k}\n",
            "give key_file or certificates, not both",
        ),
        ("        certificates: {ca_key: /k, colour: blue}\n", "colour"),
    ],
    ids=["no-signer", "two-signers", "too-short", "too-long", "bad-cidr", "with-key", "unknown"],
)
def test_a_bad_certificates_block_is_refused_naming_why(
    tmp_path: Path, block: str, reason: str
) -> None:
    with pytest.raises(ProfileError) as refused:
        load(tmp_path, block)
    message = str(refused.value)
    assert reason in message, message
    assert "site.yaml:" in message
