"""`iri-gateway profile check --identity`: which login account each resource would run a
sample identity's work as, and which mapping decided; and which projects each resource's
project rules grant it, and by which rule (issue 31's account and project rules).

An identity is what an identity provider would say of a user: a JSON object of claims (a
decoded token's payload, say). Its gateway user name is its `username_claim`, as the
gateway's `jwt_username_claim` setting takes it; the resource's `user_mapping` is tried
with that name first, then its `account_rules` in order (`SshConnection.account_of`). The
projects shown are those the rules grant (`Resource.project_grants_of`), besides the token's
own (which the gateway's `jwt_projects_claim` setting reads, not the profile).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iri_gateway.profiles.loading import ProfileRegistry

IDENTITY_FILE_LIMIT = 1 << 20
"""Bytes of a sample identity file read at most (a token's claims are a few hundred)."""


class IdentityFileError(ValueError):
    """A sample identity file that cannot be used, named with the reason."""


@dataclass(frozen=True)
class Identity:
    """A sample identity: its label (the file's name), gateway user name and claims."""

    label: str
    user: str
    claims: Mapping[str, Any]


@dataclass(frozen=True)
class AccountRow:
    """The account one resource gives one identity, and how (None: refused, 403)."""

    identity: str
    resource: str
    account: str | None
    how: str


@dataclass(frozen=True)
class ProjectRow:
    """A project one resource's rules grant one identity, and which rule (None: the rules
    grant none, or the resource has none)."""

    identity: str
    resource: str
    project: str | None
    how: str


def read_identity(path: Path, username_claim: str) -> Identity:
    """The sample identity in the JSON file `path`; IdentityFileError when it is not a JSON
    object with a text `username_claim`."""
    try:
        with path.open("rb") as file:
            data = file.read(IDENTITY_FILE_LIMIT + 1)
    except OSError as error:
        raise IdentityFileError(f"{path}: cannot read it: {error.strerror or error}") from None
    if len(data) > IDENTITY_FILE_LIMIT:
        raise IdentityFileError(f"{path}: larger than {IDENTITY_FILE_LIMIT} bytes")
    try:
        claims = json.loads(data)
    except ValueError as error:
        raise IdentityFileError(f"{path}: not JSON: {error}") from None
    if not isinstance(claims, dict):
        raise IdentityFileError(f"{path}: not a JSON object of claims")
    user = claims.get(username_claim)
    if not isinstance(user, str) or not user:
        raise IdentityFileError(
            f"{path}: claim {username_claim!r} (the user's name) is missing or not text; "
            "name another with --username-claim"
        )
    return Identity(path.name, user, claims)


def account_rows(registry: ProfileRegistry, identities: list[Identity]) -> list[AccountRow]:
    """For each identity and resource, the account its work would run as."""
    rows: list[AccountRow] = []
    for identity in identities:
        for loaded in registry:
            connection = loaded.resource.connection
            ssh = connection.ssh
            if connection.mode != "ssh" or ssh is None:
                rows.append(AccountRow(identity.label, loaded.id, "", "the gateway's own (local)"))
                continue
            found = ssh.mapping_of(identity.user, identity.claims)
            if found is None:
                how = f"no mapping of {identity.user!r} and no rule matches: refused (403)"
                rows.append(AccountRow(identity.label, loaded.id, None, how))
            else:
                rows.append(AccountRow(identity.label, loaded.id, *found))
    return rows


def project_rows(registry: ProfileRegistry, identities: list[Identity]) -> list[ProjectRow]:
    """For each identity and resource, each project the resource's rules grant it and the
    first rule that does; one row saying so when none does."""
    rows: list[ProjectRow] = []
    for identity in identities:
        for loaded in registry:
            grants = loaded.resource.project_grants_of(identity.claims)
            rows.extend(ProjectRow(identity.label, loaded.id, *grant) for grant in grants)
            if not grants:
                how = (
                    "no project rule matches: the token's own projects only"
                    if loaded.resource.project_rules
                    else "no project rules: the token's own projects only"
                )
                rows.append(ProjectRow(identity.label, loaded.id, None, how))
    return rows
