"""The engine's file entry points: which files a user may reach on a resource.

Thin on purpose: what may be read or written, and how, is `iri_gateway.service.files`'s
business; here the job store answers which job folders are the user's, and the profile which
roots it grants them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.service.files import policy
from iri_gateway.service.files.reads import FileReader, UserFiles
from iri_gateway.service.jobs.context import JobsContext
from iri_gateway.service.operations.backends import NO_CLAIMS, Backend
from iri_gateway.service.operations.store import JobRecord


class JobFiles:
    """The files each user may reach: their jobs' folders and the roots granted them."""

    def __init__(self, context: JobsContext) -> None:
        self.context = context

    def files(
        self, *, owner: str, resource_id: str, claims: Mapping[str, Any] = NO_CLAIMS
    ) -> UserFiles:
        """The files `owner` (whose identity says `claims`) may read on the resource, as
        the account mapped to them: the job folders the gateway made for their jobs and
        the roots their profile grants (see `iri_gateway.service.files`)."""
        loaded = self.context.registry.get(resource_id)
        return self._files(owner, loaded, self.context.backends.get(loaded, owner, claims))

    def job_files(self, record: JobRecord) -> UserFiles:
        """The files of `record`'s owner as the account that runs the job (its output is
        read as the job's account, whatever the owner maps to now)."""
        loaded = self.context.registry.get(record.resource_id)
        return self._files(record.owner, loaded, self.context.backends.for_job(loaded, record))

    def _files(self, owner: str, loaded: LoadedResource, backend: Backend) -> UserFiles:
        store = self.context.store

        def owns_folder(name: str) -> bool:
            record = store.get(name)
            return (
                record is not None
                and record.owner == owner
                and record.resource_id == loaded.id
                and not record.named_directory
                and record.account in (None, backend.account)
            )

        scope = policy.Scope(
            roots=self.roots(owner, loaded, backend),
            work_root=backend.work_root,
            reserved=backend.reserved,
            owns_folder=owns_folder,
            special_modes=loaded.resource.files.allow_special_modes,
        )
        return UserFiles(scope, FileReader(backend.agents))

    def roots(self, owner: str, loaded: LoadedResource, backend: Backend) -> tuple[str, ...]:
        """The roots the resource's profile grants `owner` (placeholders filled in)."""
        return policy.granted_roots(
            loaded.resource.files.roots,
            user=owner,
            account=backend.account or owner,
            home=lambda: backend.home,
        )
