"""The gateway's side of changing files: place each path (`policy`), run the writer where the
files are (`writer`), turn its answer into results or errors.

Where a user may write is where they may read (`Scope.locate`: their job folders and the
roots the profile grants, never the gateway's own folders), with more refused before anything
runs: a root or a job folder itself as what `rm`, `mv` or `cp` removes, moves or makes; a
tree that holds the gateway's folders as what `rm` or `mv` takes away; names with NUL or
other control characters (a newline in a name breaks every line-based tool); a symbolic link
whose target, taken lexically (a relative one from the link's folder), is not a path the user
may read (the writer then follows it through the links on its way: `writer.leads_inside`).
The writer runs in the file agent (`agents`), never in the serving process: on this machine as
the gateway's account, over SSH on the login node as the user's mapped account, each request
in a worker with limits (CPU time, memory, wall time) that a cancel kills at once.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from iri_gateway.service.files.agents import Progress
from iri_gateway.service.files.policy import Scope, path_problem, within
from iri_gateway.service.files.reads import FileReader
from iri_gateway.service.files.refusals import FileRefusedError, Refusal


class FileWriter(FileReader):
    """Runs writer requests (and the archiver's) in the file agent; never sent twice."""

    idempotent = False

    def run_reporting(self, request: dict[str, Any], progress: Progress) -> dict[str, Any]:
        """`run`, with `progress` called with the work's counts as it goes; whatever it
        raises stops the work, which removes what it wrote (`Agents.run_reporting`)."""
        return self.agents.run_reporting(request, progress)


def name_problem(path: str) -> str | None:
    """Why `path` cannot be written to: `policy.path_problem`, the rule of every path."""
    return path_problem(path)


@dataclass(frozen=True)
class UserWrites:
    """The changes one user may make on one resource, and how to make them."""

    scope: Scope
    writer: FileWriter

    def place(self, path: str, field: str, job_folder: str | None = None) -> dict[str, Any]:
        """Where the writer finds `path`: FileRefusedError when it cannot name a file
        (422) or lies outside what the user may use (the one 404)."""
        problem = name_problem(path)
        if problem is not None:
            raise FileRefusedError(Refusal.INVALID_PATH, problem, field)
        anchor = self.scope.locate(path, job_folder)
        if anchor is None:
            raise FileRefusedError(Refusal.NOT_FOUND, "", field)
        return anchor.spec()

    def movable(self, path: str, field: str) -> dict[str, Any]:
        """`place`, refusing a root, a job folder, or a tree holding the gateway's folders."""
        placed = self.place(path, field)
        target = self.scope.absolute(path)
        if target in self.scope.roots or not placed["rest"]:
            raise FileRefusedError(
                Refusal.ROOT,
                f"{target} is one of your roots (or a job folder "
                "itself): it cannot be removed, moved or replaced",
                field,
            )
        if any(within(folder, target) for folder in (*self.scope.reserved, self.scope.work_root)):
            raise FileRefusedError(
                Refusal.RESERVED, f"{target} holds the gateway's own folders", field
            )
        return placed

    def run(
        self, operation: str, *, progress: Progress | None = None, **arguments: Any
    ) -> dict[str, Any]:
        """The writer's result for `operation` (with `progress`: reporting as it goes, see
        `FileWriter.run_reporting`); FileRefusedError for its refusal."""
        request = {"op": operation, **arguments}
        answer = (
            self.writer.run(request)
            if progress is None
            else self.writer.run_reporting(request, progress)
        )
        if not answer["ok"]:
            raise FileRefusedError.answered(answer)
        result: dict[str, Any] = answer["result"]
        return result

    def mkdir(self, path: str, parent: bool) -> dict[str, Any]:
        return self.run("mkdir", path=self.place(path, "path"), parent=parent)

    def rm(self, path: str, recursive: bool) -> dict[str, Any]:
        return self.run("rm", path=self.movable(path, "path"), recursive=recursive)

    def mv(self, path: str, target: str) -> dict[str, Any]:
        return self.run(
            "mv", path=self.movable(path, "path"), target=self.movable(target, "target_path")
        )

    def cp(
        self, path: str, target: str, *, dereference: bool, max_files: int, max_bytes: int
    ) -> Prepared:
        """The copy of `path` to `target`, placed (refusals now), to be run."""
        return Prepared(
            self,
            "cp",
            {
                "path": self.place(path, "path"),
                "target": self.movable(target, "target_path"),
                "dereference": dereference,
                "max_files": max_files,
                "max_bytes": max_bytes,
            },
        )

    def chmod(self, path: str, mode: str) -> dict[str, Any]:
        """The mode changed; setuid, setgid and sticky only where the resource's profile
        allows them (`files.allow_special_modes`; the writer refuses them otherwise)."""
        return self.run(
            "chmod",
            path=self.place(path, "path"),
            mode=mode,
            allow_special_modes=self.scope.special_modes,
        )

    def chown(self, path: str, owner: str, group: str) -> dict[str, Any]:
        return self.run("chown", path=self.place(path, "path"), owner=owner, group=group)

    def symlink(self, target: str, link: str) -> dict[str, Any]:
        """A link at `link` to `target`, which must name (lexically: a relative one from
        the link's folder) a path the user may read; it need not exist. The writer then
        follows it as the kernel would, through the links that exist on its way, and
        refuses it when that leads out of the root (or job folder) it names
        (`writer.leads_inside`)."""
        problem = name_problem(target)
        if problem is not None:
            raise FileRefusedError(Refusal.INVALID_PATH, problem, "path")
        placed = self.movable(link, "link_path")
        folder = posixpath.dirname(self.scope.absolute(link))
        resolves_to = self.scope.absolute(posixpath.join(folder, target))
        anchor = self.scope.locate(resolves_to)
        if anchor is None:
            raise FileRefusedError(
                Refusal.LINK_OUTSIDE,
                f"{target!r} ({resolves_to}) is not inside "
                "the folders you may use; a link may only point there",
                "path",
            )
        return self.run(
            "symlink", link=placed, target=target, resolves_to=resolves_to, area=anchor.spec()
        )

    def compress(
        self,
        path: str,
        target: str,
        *,
        compression: str,
        dereference: bool,
        match_pattern: str | None,
        max_files: int,
        max_bytes: int,
    ) -> Prepared:
        """The archive of `path` at `target`, placed (refusals now), to be run."""
        return Prepared(
            self,
            "compress",
            {
                "path": self.place(path, "path"),
                "target": self.movable(target, "target_path"),
                "compression": compression,
                "dereference": dereference,
                "match_pattern": match_pattern,
                "max_files": max_files,
                "max_bytes": max_bytes,
            },
        )

    def extract(
        self, path: str, target: str, *, compression: str, max_files: int, max_bytes: int
    ) -> Prepared:
        """The archive `path` unpacked into `target`, placed (refusals now), to be run: a new
        folder, or an existing one (a root or job folder itself too), where nothing is
        replaced (`archiver.Into`)."""
        return Prepared(
            self,
            "extract",
            {
                "path": self.place(path, "path"),
                "target": self.place(target, "target_path"),
                "compression": compression,
                "max_files": max_files,
                "max_bytes": max_bytes,
            },
        )

    def checksum(self, path: str) -> dict[str, Any]:
        return self.run("checksum", path=self.place(path, "path"))

    def file_type(self, path: str) -> dict[str, Any]:
        return self.run("file", path=self.place(path, "path"))


@dataclass(frozen=True)
class Prepared:
    """A long change whose places are decided (so its refusals came before it runs), to be
    run now or by a task: `run(progress)`."""

    writes: UserWrites
    operation: str
    arguments: dict[str, Any]

    def run(self, progress: Progress | None = None) -> dict[str, Any]:
        return self.writes.run(self.operation, progress=progress, **self.arguments)
