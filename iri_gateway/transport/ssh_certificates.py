"""Short-lived SSH user certificates, one per login account, signed by the gateway (issue 31).

FirecREST v2 reaches its users' accounts so: no long-lived key in each account's
`authorized_keys`, but a certificate authority the login node trusts (sshd's
`TrustedUserCAKeys`) and a certificate per account, valid for minutes. Here:

- a new Ed25519 key pair is made in memory for every certificate (never written anywhere);
- the certificate names the account as its only principal, holds the addresses it may be
  used from (`source-address`), lasts `validity` seconds (from a minute before it was made,
  for clocks a little apart), and permits nothing but commands: no pty, no agent, X11 or
  port forwarding (the last one unless the site's port proxy needs it);
- it is signed with the CA's key the gateway reads (`CaKeySigner`, through `cryptography`'s
  OpenSSH certificate builder), or by a program of the site (`CommandSigner`), whose
  certificate is checked before it is used: the key it certifies, the principal, the type;
- a new one is made when less than a quarter of the validity is left; connections opened
  with a certificate are not used past its end (`SshTransport` retires them).
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import (
    SSHCertificate,
    SSHCertificateBuilder,
    SSHCertificateType,
)

from iri_gateway.transport.base import NotSentError

CLOCK_SKEW = 60
"""Seconds a certificate is valid before it was made (the login node's clock may be ahead)."""
SIGN_TIMEOUT = 30.0
"""Seconds a site's signing program may take."""
OUTPUT_LIMIT = 65536
"""Bytes of a signing program's output read at most (a certificate is under 1 KiB)."""


class CertificateError(NotSentError):
    """No certificate could be had: the command needing it was not sent."""

    code = "ssh_certificate_failed"


@dataclass(frozen=True)
class Validity:
    """A certificate's window, in POSIX seconds."""

    after: int
    before: int


class Signer(Protocol):
    """Signs `public_key` (an OpenSSH line) for `account` over `window`: the certificate line."""

    def sign(
        self, public_key: str, account: str, window: Validity, addresses: Sequence[str]
    ) -> str: ...


class CaKeySigner:
    """Signs with the CA's private key, read once from `path` (OpenSSH format)."""

    def __init__(self, path: str, *, port_forwarding: bool = False) -> None:
        try:
            data = Path(path).expanduser().read_bytes()
        except OSError as error:
            raise CertificateError(
                f"cannot read the SSH certificate authority's key {path}: {error.strerror or error}"
            ) from None
        try:
            key = serialization.load_ssh_private_key(data, password=None)
        except (ValueError, TypeError) as error:
            raise CertificateError(
                f"{path} is not an unencrypted OpenSSH private key: {error}"
            ) from None
        if not isinstance(
            key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
        ):
            raise CertificateError(f"{path}: a CA key must be Ed25519, ECDSA or RSA")
        self._key = key
        self._port_forwarding = port_forwarding

    def sign(
        self, public_key: str, account: str, window: Validity, addresses: Sequence[str]
    ) -> str:
        subject = serialization.load_ssh_public_key(public_key.encode())
        builder = (
            SSHCertificateBuilder()
            .public_key(subject)  # type: ignore[arg-type]
            .serial(secrets.randbits(64))
            .type(SSHCertificateType.USER)
            .key_id(f"iri-gateway:{account}".encode())
            .valid_principals([account.encode()])
            .valid_after(window.after)
            .valid_before(window.before)
        )
        if addresses:
            builder = builder.add_critical_option(b"source-address", ",".join(addresses).encode())
        if self._port_forwarding:
            builder = builder.add_extension(b"permit-port-forwarding", b"")
        return builder.sign(self._key).public_bytes().decode()


class CommandSigner:
    """Signs through the site's program: `argv + [account, seconds]`, the public key on its
    input, the certificate on its output (its own words when it fails)."""

    def __init__(self, argv: Sequence[str]) -> None:
        self._argv = list(argv)

    def sign(
        self, public_key: str, account: str, window: Validity, addresses: Sequence[str]
    ) -> str:
        command = [*self._argv, account, str(window.before - int(time.time()))]
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except FileNotFoundError:
            raise CertificateError(f"the signing program {self._argv[0]!r} is not found") from None
        except OSError as error:
            raise CertificateError(
                f"cannot run the signing program {self._argv[0]!r}: {error.strerror or error}"
            ) from None
        try:
            stdout, stderr = process.communicate((public_key + "\n").encode(), SIGN_TIMEOUT)
        except subprocess.TimeoutExpired:
            # Its session, not only itself: what it started would hold the pipes open.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise CertificateError(
                f"the signing program {self._argv[0]!r} did not answer in {SIGN_TIMEOUT:g} s"
            ) from None
        if process.returncode != 0:
            said = stderr.decode(errors="replace").strip()[-500:]
            raise CertificateError(
                f"the signing program {self._argv[0]!r} failed (exit {process.returncode}): {said}"
            )
        return stdout[:OUTPUT_LIMIT].decode(errors="replace").strip()


class UserCertificates:
    """One login account's key and certificate, made anew when a quarter of its validity is
    left (thread-safe: connections opened at once share one signing)."""

    def __init__(
        self,
        signer: Signer,
        account: str,
        *,
        validity: int,
        addresses: Callable[[], Sequence[str]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._signer = signer
        self._account = account
        self._validity = validity
        self._addresses = addresses
        self._clock = clock
        self._lock = threading.Lock()
        self._current: tuple[paramiko.PKey, int] | None = None
        self.signed = 0
        """How many certificates were made (for tests and diagnostics)."""

    def key(self) -> tuple[paramiko.PKey, float]:
        """A key carrying a valid certificate, and the POSIX time its certificate ends."""
        with self._lock:
            now = self._clock()
            if self._current is None or self._current[1] - now < self._validity / 4:
                self._current = self._new(int(now))
                self.signed += 1
            return self._current

    def _new(self, now: int) -> tuple[paramiko.PKey, int]:
        private = ed25519.Ed25519PrivateKey.generate()
        public = (
            private.public_key()
            .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
            .decode()
        )
        window = Validity(now - CLOCK_SKEW, now + self._validity)
        line = self._signer.sign(public, self._account, window, list(self._addresses()))
        certificate = _checked(line, public, self._account)
        pem = private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ).decode()
        key = paramiko.Ed25519Key.from_private_key(io.StringIO(pem))
        key.load_certificate(line)
        return key, min(certificate.valid_before, window.before)


def _checked(line: str, public: str, account: str) -> SSHCertificate:
    """The certificate `line`, when it is a user certificate of `public` for `account`."""
    try:
        certificate = serialization.load_ssh_public_identity(line.encode())
    except (ValueError, TypeError) as error:
        raise CertificateError(
            f"the signer's answer is not an OpenSSH certificate: {error}"
        ) from None
    if not isinstance(certificate, SSHCertificate):
        raise CertificateError("the signer answered a public key, not a certificate")
    certified = (
        certificate.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    if certified.split()[:2] != public.split()[:2]:
        raise CertificateError("the signer certified another key than the one it was given")
    if certificate.type != SSHCertificateType.USER:
        raise CertificateError("the signer made a host certificate, not a user certificate")
    if certificate.valid_principals != [account.encode()]:
        shown = b", ".join(certificate.valid_principals).decode(errors="replace") or "any"
        raise CertificateError(
            f"the signer's certificate names the principals {shown}, not just {account!r}"
        )
    return certificate


def route_address(host: str, port: int) -> list[str]:
    """The address this machine reaches `host` from, as a one-address network (the default
    `source-address`): where the system would route a packet to it, found without sending
    one (a UDP socket's `connect`)."""
    try:
        family, _, _, _, target = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(target)
            local = probe.getsockname()[0]
    except OSError as error:
        raise CertificateError(
            f"cannot tell this machine's address towards {host}: {error.strerror or error}; "
            "set certificates.source_addresses in the profile"
        ) from None
    address = ipaddress.ip_address(local)
    return [f"{address}/{address.max_prefixlen}"]
