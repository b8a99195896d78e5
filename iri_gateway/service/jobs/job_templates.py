"""Job templates: the ones users keep (in the store's `templates` table) and the ones the
facility ships in its profiles, as one book per user.

Ownership is the jobs' rule: a user sees, uses, changes and deletes only their own templates;
another user's template is "not found", never "forbidden". Facility templates are seen by
every user and changed by nobody through the API. A name is either the facility's or a
user's: writing a template under a facility template's name is refused (409), so a job's
`template` always means one thing. Should a facility later ship a name a user already has,
the facility's wins in jobs and the user's is listed as `shadowed` until renamed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import sessionmaker

from iri_gateway.errors import GatewayError, InvalidJobSpecError, Problem
from iri_gateway.models.job_templates import (
    ClusterTemplate,
    StoredTemplate,
    TaskTemplate,
    Template,
)
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.planning.job_templates import Expanded, FacilityTemplate, closest, expand
from iri_gateway.service.operations.schema import TemplateRow
from iri_gateway.service.operations.store import JobStore

MAX_TEMPLATES_PER_USER = 1024
"""Templates one user may keep: the table cannot grow without bound through one account."""

_TEMPLATE: TypeAdapter[Template] = TypeAdapter(Template)


class TemplateNotFoundError(GatewayError):
    """No template of that name is the caller's or the facility's (404)."""

    code = "template_not_found"


class TemplateReadOnlyError(GatewayError):
    """The name is a facility template's, which the API does not change (409)."""

    code = "template_read_only"


class TemplateLimitError(GatewayError):
    """The user keeps MAX_TEMPLATES_PER_USER templates already (409)."""

    code = "template_limit"


class TemplateStore:
    """The users' templates in the database (the job store's, written in its turns)."""

    def __init__(self, store: JobStore, *, clock: Callable[[], float] = time.time) -> None:
        self._sessions = sessionmaker(store.engine, expire_on_commit=False)
        self._writing = store.writing
        self._clock = clock

    def names(self, owner: str) -> list[str]:
        with self._sessions() as session:
            return list(
                session.scalars(
                    select(TemplateRow.name)
                    .where(TemplateRow.owner == owner)
                    .order_by(TemplateRow.name)
                )
            )

    def all(self, owner: str) -> list[tuple[str, Template, float]]:
        """(name, template, updated_at) of every template `owner` keeps, by name."""
        with self._sessions() as session:
            rows = session.execute(
                select(TemplateRow.name, TemplateRow.body, TemplateRow.updated_at)
                .where(TemplateRow.owner == owner)
                .order_by(TemplateRow.name)
            ).all()
        return [(name, _TEMPLATE.validate_python(body), at) for name, body, at in rows]

    def get(self, owner: str, name: str) -> tuple[Template, float] | None:
        with self._sessions() as session:
            row = session.get(TemplateRow, (owner, name))
            if row is None:
                return None
            return _TEMPLATE.validate_python(row.body), row.updated_at

    def put(self, owner: str, name: str, template: Template) -> bool:
        """Write `owner`'s template `name` (True: it is new). Two writers of one name at
        once each write the whole body; the last commit stands, never a mixture: the row is
        updated in one statement, or inserted, and an insert that loses the race to the
        other writer's insert becomes an update."""
        body: dict[str, Any] = _TEMPLATE.dump_python(template, mode="json", exclude_unset=True)
        for _attempt in range(3):
            now = self._clock()
            with self._writing() as session:
                changed = getattr(
                    session.execute(
                        update(TemplateRow)
                        .where(TemplateRow.owner == owner, TemplateRow.name == name)
                        .values(body=body, updated_at=now)
                    ),
                    "rowcount",
                    0,
                )
            if changed:
                return False
            if len(self.names(owner)) >= MAX_TEMPLATES_PER_USER:
                raise TemplateLimitError(
                    f"user {owner!r} keeps {MAX_TEMPLATES_PER_USER} templates, the most one "
                    "user may; delete one first"
                )
            try:
                with self._writing() as session:
                    session.add(
                        TemplateRow(
                            owner=owner, name=name, body=body, created_at=now, updated_at=now
                        )
                    )
                return True
            except IntegrityError:
                continue  # another writer inserted it first: update it
        raise GatewayError(
            f"template {name!r} could not be written: it changed three times "
            "while it was being written"
        )

    def delete(self, owner: str, name: str) -> bool:
        with self._writing() as session:
            return bool(
                getattr(
                    session.execute(
                        delete(TemplateRow).where(
                            TemplateRow.owner == owner, TemplateRow.name == name
                        )
                    ),
                    "rowcount",
                    0,
                )
            )


class TemplateBook:
    """Each user's view of the templates: their own and the facility's."""

    def __init__(self, store: TemplateStore, facility: dict[str, FacilityTemplate]) -> None:
        self.store = store
        self.facility = facility

    def listed(self, owner: str) -> list[StoredTemplate]:
        """The facility's templates, then the user's (a user's template that a facility
        template of the same name shadows is listed with `shadowed`)."""
        shipped = [
            StoredTemplate(
                name=name, source="facility", facility=entry.facility, template=entry.template
            )
            for name, entry in sorted(self.facility.items())
        ]
        own = [
            StoredTemplate(
                name=name,
                source="user",
                updated_at=at,
                template=template,
                shadowed=name in self.facility,
            )
            for name, template, at in self.store.all(owner)
        ]
        return shipped + own

    def get(self, owner: str, name: str) -> StoredTemplate:
        entry = self.facility.get(name)
        if entry is not None:
            return StoredTemplate(
                name=name, source="facility", facility=entry.facility, template=entry.template
            )
        found = self.store.get(owner, name)
        if found is None:
            raise TemplateNotFoundError(
                f"no template {name!r} ({closest(name, self._names(owner))})"
            )
        return StoredTemplate(name=name, source="user", updated_at=found[1], template=found[0])

    def put(self, owner: str, name: str, template: Template) -> tuple[StoredTemplate, bool]:
        """Keep `template` as `owner`'s `name` (True: created). A facility template's name is
        refused (409); a cluster template's roles must name task templates the user can use
        (422 with the closest names)."""
        entry = self.facility.get(name)
        if entry is not None:
            raise TemplateReadOnlyError(
                f"template {name!r} is shipped by facility {entry.facility!r} and cannot be "
                "changed; choose another name"
            )
        if isinstance(template, ClusterTemplate):
            visible = self.visible(owner)
            tasks = [n for n, t in visible.items() if isinstance(t, TaskTemplate)]
            problems = [
                Problem(
                    f"roles[{index}].task",
                    f"no task template {role.task!r}"
                    if role.task not in visible
                    else f"{role.task!r} is a cluster template, not a task template",
                    closest(role.task, tasks),
                )
                for index, role in enumerate(template.roles)
                if not isinstance(visible.get(role.task), TaskTemplate)
            ]
            if problems:
                raise InvalidJobSpecError(problems)
        created = self.store.put(owner, name, template)
        return self.get(owner, name), created

    def delete(self, owner: str, name: str) -> None:
        entry = self.facility.get(name)
        if entry is not None:
            raise TemplateReadOnlyError(
                f"template {name!r} is shipped by facility {entry.facility!r} and cannot be deleted"
            )
        if not self.store.delete(owner, name):
            raise TemplateNotFoundError(
                f"no template {name!r} ({closest(name, self._names(owner))})"
            )

    def visible(self, owner: str) -> dict[str, Template]:
        """Every template `owner` may name in a job; the facility's win over shadowed ones."""
        found: dict[str, Template] = {name: template for name, template, _ in self.store.all(owner)}
        found.update({name: entry.template for name, entry in self.facility.items()})
        return found

    def expand(self, owner: str, spec: JobSpec) -> Expanded:
        """`spec` with its template applied (see planning/job_templates.py); no query when the
        job names no template."""
        if spec.template is None:
            return Expanded(spec, None)
        return expand(spec, self.visible(owner))

    def _names(self, owner: str) -> list[str]:
        return sorted({*self.facility, *self.store.names(owner)})
