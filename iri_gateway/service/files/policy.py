"""Which folders a user may use on a resource, decided lexically before anything is touched.

A user may name as a job's `directory`, and read through the filesystem operations, only
(a) the job folders the gateway itself made for that user's jobs (jobs that named no
`directory`: `<job root>/<job id>`) and (b) the roots the resource's profile grants
(`files.roots`, with `{user}`, `{account}`, `{account_initial}` and `~` filled in for that
user). The gateway's own files and folders (its job root, and locally its data directory,
store files, tokens file and SSH keys) are never reachable through a root, even a root
that contains them: refused here by name, and by the agent by identity at any depth.

Paths are compared component-wise after lexical normalisation (`a/../b` is `b`); what is on
disk is then read by `reader`, which opens every component the user or a job could have made
without following links out. A path is either placed (`Anchor`: where the reader starts and
what it walks) or refused, and refusal looks the same whether or not the path exists.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from iri_gateway.errors import Problem
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.shell import has_control_characters

PLACEHOLDER_FIELDS = ("{user}", "{account}", "{account_initial}")
PATH_MAX = 4096
"""Longest path a user may ask for, in UTF-8 bytes (Linux PATH_MAX)."""


def path_problem(path: str) -> str | None:
    """Why `path` cannot name a file at all (empty, NUL or another control character, lone
    surrogates, longer than PATH_MAX bytes), or None when it can. The one rule of every
    operation that takes a path (reads, writes, upload, download, job paths): a newline or
    tab in a name is refused alike everywhere, not written by one operation and refused by
    the next."""
    if not path:
        return "must be a non-empty path"
    if "\0" in path:
        return "must not contain NUL"
    if has_control_characters(path):  # as a job's paths are checked (`shell`)
        return "must not contain newlines, tabs or other control characters"
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        return "must be valid Unicode (no lone surrogates)"
    if size > PATH_MAX:
        return f"must be at most {PATH_MAX} bytes (UTF-8); it is {size}"
    return None


def safe_component(value: str) -> bool:
    """True when `value` can stand as one path component: no '/', not '.' or '..', not
    empty, no NUL or other control characters."""
    return (
        value not in ("", ".", "..")
        and "/" not in value
        and not any(ord(c) < 32 or ord(c) == 127 for c in value)
    )


def normal(path: str) -> str:
    """`path` normalised lexically ('//' collapsed, '.' and '..' applied)."""
    absolute = path.startswith("/")
    text = posixpath.normpath(("/" + path.lstrip("/")) if absolute else path)
    return text


def within(path: str, root: str) -> bool:
    """True when the normalised absolute `path` is `root` or lies below it."""
    if root == "/":
        return path.startswith("/")
    return path == root or path.startswith(root + "/")


def granted_roots(
    templates: Sequence[str], *, user: str, account: str, home: Callable[[], str]
) -> tuple[str, ...]:
    """The roots `templates` grant this user, absolute and normalised.

    A root whose filled-in values are not single safe components is not granted (so a user
    called '..' gets nothing); `home` is asked only when a template starts with '~'.
    """
    values = {"{user}": user, "{account}": account, "{account_initial}": account[:1]}
    roots: list[str] = []
    for template in templates:
        used = [key for key in PLACEHOLDER_FIELDS if key in template]
        if any(not safe_component(values[key]) for key in used):
            continue
        path = template
        for key in used:
            path = path.replace(key, values[key])
        if path == "~" or path.startswith("~/"):
            base = home()
            if not base.startswith("/") or "\0" in base:
                continue
            path = base + "/" + path[1:]
        roots.append(normal(path))
    return tuple(dict.fromkeys(roots))


def _describe(roots: Sequence[str]) -> str:
    return (
        ", ".join(roots)
        if roots
        else "none: leave `directory` out and the job runs in a folder the gateway makes"
    )


def job_path_problems(
    spec: JobSpec,
    *,
    directory: str,
    named: bool,
    roots: Sequence[str],
    reserved: Sequence[str],
    resource_id: str,
) -> list[Problem]:
    """What is wrong with where the job would run and write: its `directory` (when the user
    `named` it) must lie inside a granted root and outside the gateway's own folders;
    `stdin_path`, `stdout_path` and `stderr_path`, taken relative to `directory`, must lie
    inside the directory or inside a granted root (outside the gateway's folders)."""

    def usable(path: str) -> bool:
        return any(within(path, root) for root in roots) and not any(
            within(path, folder) for folder in reserved
        )

    problems: list[Problem] = []
    if named and not usable(directory):
        shown = repr(spec.directory) + (f" ({directory})" if directory != spec.directory else "")
        problems.append(
            Problem(
                "directory",
                f"{shown} is not inside a folder you may use on {resource_id!r}",
                _describe(roots),
            )
        )
    for field in ("stdin_path", "stdout_path", "stderr_path"):
        value = getattr(spec, field)
        if value is None:
            continue
        path = normal(posixpath.join(directory, value))
        if within(path, directory) or usable(path):
            continue
        problems.append(
            Problem(
                field,
                f"{value!r} ({path}) is neither inside the job's directory nor inside a "
                f"folder you may use on {resource_id!r}",
                _describe(roots),
            )
        )
    return problems


@dataclass(frozen=True)
class Anchor:
    """Where a read starts: `base` is opened as it is (an admin chose it), `top` (a job
    folder's own name) is never a link, `rest` is walked with links followed only inside
    `base/top`; folders in `reserved` are never entered."""

    base: str
    top: tuple[str, ...]
    rest: tuple[str, ...]
    reserved: tuple[str, ...]

    def spec(self) -> dict[str, Any]:
        """The place as the reader, the writer and the transfer agent take it (JSON)."""
        return {
            "base": self.base,
            "top": list(self.top),
            "rest": list(self.rest),
            "reserved": list(self.reserved),
        }


@dataclass(frozen=True)
class Scope:
    """What one user may read on one resource."""

    roots: tuple[str, ...]
    work_root: str
    reserved: tuple[str, ...]
    owns_folder: Callable[[str], bool]
    """True when `<work_root>/<name>` is a job folder the gateway made for this user."""
    special_modes: bool = False
    """True when `chmod` may set setuid, setgid and sticky bits (the profile's
    `files.allow_special_modes`)."""

    def _inside_job_root(self, base: str) -> tuple[str, ...]:
        """The gateway's own files and folders as a job folder's walks see them: all of them
        but the job root `base` itself (the folder the job folder is reached from); a job's
        hard link to the store or tokens is then refused like any other."""
        return tuple(path for path in self.reserved if normal(path) != normal(base))

    def absolute(self, path: str) -> str:
        """`path` normalised; a relative path is taken relative to the job root."""
        return normal(path if path.startswith("/") else posixpath.join(self.work_root, path))

    def locate(self, path: str, job_folder: str | None = None) -> Anchor | None:
        """Where to read `path` from, or None when the user may not read it.

        `job_folder` is one more folder the gateway made for this user's job, as the job's
        record says (made under the job root of its day, which may have changed since).
        """
        if "\0" in path:
            return None
        target = self.absolute(path)
        if job_folder is not None and job_folder.startswith("/"):
            folder = normal(job_folder)
            parent, name = posixpath.split(folder)
            if within(target, folder) and safe_component(name):
                rest = tuple(part for part in target[len(folder) :].split("/") if part)
                return Anchor(parent, (name,), rest, self._inside_job_root(parent))
        root = normal(self.work_root)
        if within(target, root):
            below = [part for part in target[len(root) :].split("/") if part]
            if below and self.owns_folder(below[0]):
                return Anchor(root, (below[0],), tuple(below[1:]), self._inside_job_root(root))
            return None
        if any(within(target, folder) for folder in self.reserved):
            return None
        granted = [r for r in self.roots if within(target, r)]
        if not granted:
            return None
        base = min(granted, key=len)  # the widest root: links may go anywhere inside it
        rest = tuple(part for part in target[len(base) :].split("/") if part)
        return Anchor(base, (), rest, self.reserved)
