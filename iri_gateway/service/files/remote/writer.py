"""The no-follow file writer: `mkdir`, `rm`, `mv`, `cp`, `chmod`, `chown`, `symlink`, and the
reads `checksum` and `file`, each done relative to folders opened without following links.

Like `reader` (whose resolution it uses: `reader.Area`), this module is self-contained apart
from that one import and the standard library: the gateway calls `serve` in-process when files
are written as its own account, and over SSH sends this file and the reader's to the login
node, where they run with `python3 -I -c` as the user's mapped account, so that the operating
system's permissions apply too. One JSON request on stdin, one JSON answer on stdout.

A request names one or two places (`{"base", "top", "rest", "reserved"}`, as the reader's):
`path`, and for `mv`, `cp` and `symlink` a second one. The folder holding a place's last
component is reached by `Area.resolve` (every component opened with `O_NOFOLLOW` relative to
the one above; links inside the area followed lexically, links out refused), and the change is
then made by name relative to that folder's descriptor (`mkdir`, `unlink`, `rmdir`, `rename`,
`symlink` with `dir_fd`; `chmod` and `chown` on a descriptor opened `O_PATH | O_NOFOLLOW`), so
a link swapped in at any moment cannot redirect it: the change lands inside, or fails.

A place that is its area itself (a granted root, or the job folder) is never removed, moved
or copied onto (`root`). The gateway's own files and folders are refused inside any tree
(`reserved`, naming the one found: `cp` as it counts, before writing), and a folder holding
one is never removed, moved, or given another mode or owner (`Area.refuse_holder`). `chmod`
refuses setuid, setgid and sticky bits unless the request allows them (the profile's
`files.allow_special_modes`), `chown` any owner but the account this runs as and any group
it is not in (`not_allowed`). `mv` of a folder checks every link in it from its new place,
as `cp` does (`_links_stay`). Every walk is iterative with one descriptor (`reader.Walker`).
`rm` of a folder needs `recursive`, and deletes the tree through descriptors, unlinking
links, never following them. `cp` copies a tree after counting it
(`max_files`, `max_bytes`: `too_large` beyond), copies links as links when their target stays
inside the target's area (`link_outside` otherwise), and never overwrites. It writes under a
hidden `work_name` beside the target, renamed to the target only when complete
(`move_new`), so a killed writer leaves nothing at the target's name, and what killed
writers of this host left is removed by the next such operation into the folder
(`remove_stale_work`); a copy that fails or is stopped (its progress callback, `reporter`,
raised) removes what it made. Errors are answers:
`{"ok": false, "error": KIND, "detail", "field"}`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import grp
import hashlib
import os
import posixpath
import pwd
import shutil
import stat
import subprocess
from functools import cache
from typing import Any

from iri_gateway.service.files.remote import reader
from iri_gateway.service.files.remote.reader import Area, Refused, Walker

CHUNK = 1024 * 1024
"""Bytes copied or hashed per read."""
MAGIC_BYTES = 64 * 1024
"""Bytes of a file shown to libmagic (`file -b -`) to tell its type."""

DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""How a folder is opened below a descriptor: never through a link at its last component."""
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
"""How a new file is made: exclusively (never an existing one, never through a link)."""
_PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def os_refusal(error: OSError, field: str) -> Refused:
    """An operating-system refusal as an answer naming `field`."""
    reason = os.strerror(error.errno) if error.errno else str(error)
    if error.errno in (errno.EPERM, errno.EACCES, errno.EROFS):
        return Refused("denied", reason, field)
    if error.errno == errno.EEXIST:
        return Refused("exists", reason, field)
    if error.errno == errno.ENOTEMPTY:
        return Refused("not_empty", reason, field)
    if error.errno == errno.EXDEV:
        return Refused("cross_device", reason, field)
    if error.errno in (errno.ENOENT, errno.ELOOP):
        return Refused("not_found", reason, field)
    if error.errno in (errno.EINVAL, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG):
        return Refused("invalid", reason, field)
    return Refused("failed", reason, field)


class Place:
    """One path of a request: its area (open), the folder holding its last component (open),
    that component's name, and the components as resolved."""

    def __init__(self, spec: dict[str, Any], field: str, *, follow_final: bool = False) -> None:
        self.field = field
        try:
            self.area = Area(str(spec["base"]), list(spec["top"]), list(spec["reserved"]))
        except Refused:
            raise Refused("not_found", "", field) from None
        try:
            rest = [str(part) for part in spec["rest"]]
            if follow_final:
                self.fd, name, self.parts = self.area.resolve(rest, True)
            elif rest:
                self.fd, self.parts = self._folder(rest[:-1])
                name = reader.checked_name(rest[-1])
                self.parts = [*self.parts, name]
            else:
                self.fd, name, self.parts = os.dup(self.area.base_fd), None, []
        except Refused as refused:
            self.area.close()
            raise Refused(refused.kind, refused.detail, refused.field or field) from None
        except BaseException:
            self.area.close()
            raise
        if name is None or len(self.parts) <= len(self.area.top):
            self.close()
            raise Refused(
                "root", "is the folder itself (a root you were granted, or a job folder)", field
            )
        self.name = name
        info = self.lstat()
        if info is not None and (info.st_dev, info.st_ino) in self.area.reserved:
            self.close()
            raise Refused("not_found", "", field)

    def _folder(self, rest: list[str]) -> tuple[int, list[str]]:
        """The open folder `rest` names (links inside followed; it may not be one itself,
        even swapped in now) and its components as resolved."""
        fd, name, parts = self.area.resolve(rest, follow_final=True)
        if name is None:
            return fd, parts
        try:
            return self.area._open_folder(fd, name, len(parts) - 1), parts
        except reader.LinkMet:
            raise Refused("not_found") from None
        finally:
            os.close(fd)

    def close(self) -> None:
        os.close(self.fd)
        self.area.close()

    def __enter__(self) -> Place:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def lstat(self) -> os.stat_result | None:
        try:
            return os.stat(self.name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise os_refusal(error, self.field) from None

    def absolute(self, parts: list[str] | None = None) -> str:
        """The place (or `parts` of its area) as an absolute path."""
        return "/" + "/".join(self.area.base_parts + (self.parts if parts is None else parts))

    def stays_inside(self, link_parts: list[str], target: str) -> bool:
        """True when a link at `link_parts` with `target` points inside this area."""
        try:
            self.area.splice(link_parts, len(link_parts) - 1, target)
        except Refused:
            return False
        return True

    def entry(self) -> dict[str, Any]:
        info = self.lstat()
        if info is None:
            raise Refused("not_found", "", self.field)
        link = os.readlink(self.name, dir_fd=self.fd) if stat.S_ISLNK(info.st_mode) else None
        return reader.entry_of(self.absolute(), info, link, reader.Names())


def must_exist(place: Place) -> os.stat_result:
    """`place`'s status (not followed); Refused `not_found`, naming its field, when it is
    not there."""
    info = place.lstat()
    if info is None:
        raise Refused("not_found", "", place.field)
    return info


def must_be_absent(place: Place) -> None:
    """Refused `exists`, naming `place`'s field, when something is there already: nothing
    is ever replaced."""
    if place.lstat() is not None:
        raise Refused("exists", "already exists (nothing is overwritten)", place.field)


# ---- mkdir, symlink ------------------------------------------------------------------------


def do_mkdir(request: dict[str, Any]) -> dict[str, Any]:
    spec = request["path"]
    rest = list(spec["rest"])
    steps = range(1, len(rest) + 1) if request.get("parent") else range(len(rest), len(rest) + 1)
    for count in steps:
        last = count == len(rest)
        with Place({**spec, "rest": rest[:count]}, "path") as place:
            info = place.lstat()
            if info is None:
                try:
                    os.mkdir(place.name, 0o777, dir_fd=place.fd)
                except OSError as error:
                    raise os_refusal(error, "path") from None
            elif last and not request.get("parent"):
                raise Refused("exists", "already exists", "path")
            elif stat.S_ISLNK(info.st_mode):
                with Place({**spec, "rest": rest[:count]}, "path", follow_final=True) as real:
                    if not stat.S_ISDIR(must_exist(real).st_mode):
                        raise Refused("not_directory", "is not a directory", "path")
            elif not stat.S_ISDIR(info.st_mode):
                raise Refused("not_directory", "is not a directory", "path")
            if last:
                return {"output": place.entry()}
    raise Refused("root", "is the folder itself", "path")


def do_symlink(request: dict[str, Any]) -> dict[str, Any]:
    target, expected = str(request["target"]), str(request["resolves_to"])
    with Place(request["link"], "link_path") as link:
        if not target.startswith("/"):
            # Checked lexically from where the link really is: the folder holding it may
            # have been reached through a link, which changes what `..` means.
            folder = posixpath.dirname(link.absolute())
            if posixpath.normpath(posixpath.join(folder, target)) != expected:
                raise Refused(
                    "link_outside",
                    "the link's folder is reached through a "
                    "symbolic link, so a relative target would not point where "
                    "it seems; give an absolute target",
                    "path",
                )
        must_be_absent(link)
        leads_inside(posixpath.dirname(link.absolute()), target, request["area"])
        try:
            os.symlink(target, link.name, dir_fd=link.fd)
        except OSError as error:
            raise os_refusal(error, "link_path") from None
        return {"output": link.entry()}


def leads_inside(folder: str, target: str, spec: dict[str, Any]) -> None:
    """Refused (`link_outside`, naming `path`) unless `target`, followed from `folder` as
    the kernel would follow it, stays in the area `spec` names (where the gateway placed the
    target, lexically): every existing component below the area is looked at without
    following it, and a link met is resolved from its own folder and checked the same way
    (at most `reader.MAX_LINKS`: a loop is refused too). Components that do not exist are
    taken as named; the area's own folders above are taken lexically (an admin chose them)."""
    try:
        area = Area(str(spec["base"]), list(spec["top"]), list(spec["reserved"]))
    except Refused:
        return  # the area is not there: nothing on the way exists to lead anywhere
    inside = area.base_parts + area.top
    path = [] if target.startswith("/") else reader.split_path(folder)
    todo, links = [part for part in target.split("/") if part not in ("", ".")], 0
    try:
        while todo:
            name = todo.pop(0)
            if name == "..":
                path = path[:-1]
                continue
            path = [*path, name]
            if path == inside[: len(path)]:
                continue  # the area itself, or a folder above it
            if path[: len(inside)] != inside:
                raise Refused(
                    "link_outside",
                    f"{target!r} leads outside the folders you may "
                    f"use (to /{'/'.join(path)[:300]}); a link may only point "
                    "inside them",
                    "path",
                )
            text = _link_text(area, path[len(inside) :])
            if text is None:
                continue
            links += 1
            if links > reader.MAX_LINKS:
                raise Refused(
                    "link_outside",
                    f"{target!r} passes more than "
                    f"{reader.MAX_LINKS} symbolic links (a loop?): it cannot be "
                    "followed to a place inside the folders you may use",
                    "path",
                )
            path = [] if text.startswith("/") else path[:-1]
            todo = [part for part in text.split("/") if part not in ("", ".")] + todo
    finally:
        area.close()


def _link_text(area: Area, rest: list[str]) -> str | None:
    """The text of the link at `rest` in `area` (its folders walked without following
    links out); None when it is not a link, or not there (yet). Refused when it is one of
    the gateway's own folders."""
    try:
        fd, name, parts = area.resolve(rest[:-1], follow_final=True)
    except Refused:
        return None
    try:
        if name is not None:
            inner = area._open_folder(fd, name, len(parts) - 1)
            os.close(fd)
            fd = inner
        info = os.stat(rest[-1], dir_fd=fd, follow_symlinks=False)
        if (info.st_dev, info.st_ino) in area.reserved:
            raise Refused("link_outside", "leads into the gateway's own folders", "path")
        return os.readlink(rest[-1], dir_fd=fd) if stat.S_ISLNK(info.st_mode) else None
    except (OSError, reader.LinkMet):
        return None
    except Refused as refused:
        if refused.kind == "link_outside":
            raise
        return None
    finally:
        os.close(fd)


# ---- rm ------------------------------------------------------------------------------------


def _remove_tree(area: Area, fd: int, where: str = "") -> None:
    """Everything inside the open folder `fd` (`where`, for messages), depth first and
    iteratively (`reader.Walker`); links unlinked, never followed. One of the gateway's own
    files or folders met on the way stops it (`Area.refuse_reserved`): the callers refuse a
    folder that holds one before anything is removed (`Area.refuse_holder`), so this is met
    only through a hard link or a change made meanwhile."""
    with Walker(fd) as walker:
        for kind, name, info in walker:
            if kind == "leave":
                os.rmdir(name, dir_fd=walker.fd)
                continue
            area.refuse_reserved(info, f"{where}/{walker.relative(name)}")
            if not stat.S_ISDIR(info.st_mode):
                os.unlink(name, dir_fd=walker.fd)
                continue
            try:
                walker.enter(name, info)
            except OSError as error:
                if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                os.unlink(name, dir_fd=walker.fd)  # swapped for a link or file meanwhile


def do_rm(request: dict[str, Any]) -> dict[str, Any]:
    with Place(request["path"], "path") as place:
        info = must_exist(place)
        removed = place.absolute()
        place.area.refuse_holder(info, removed)
        try:
            if not stat.S_ISDIR(info.st_mode):
                os.unlink(place.name, dir_fd=place.fd)
                return {"output": removed}
            if not request.get("recursive"):
                raise Refused(
                    "directory",
                    "is a directory; set `recursive` to remove it and everything in it",
                    "recursive",
                )
            try:
                inner = os.open(place.name, DIRECTORY, dir_fd=place.fd)
            except OSError as error:
                if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                os.unlink(place.name, dir_fd=place.fd)
                return {"output": removed}
            try:
                place.area._guard(os.fstat(inner))
                _remove_tree(place.area, inner, removed)
            finally:
                os.close(inner)
            os.rmdir(place.name, dir_fd=place.fd)
        except OSError as error:
            raise os_refusal(error, "path") from None
        return {"output": removed}


# ---- mv ------------------------------------------------------------------------------------


def do_mv(request: dict[str, Any]) -> dict[str, Any]:
    with (
        Place(request["path"], "path") as source,
        Place(request["target"], "target_path") as target,
    ):
        info = must_exist(source)
        source.area.refuse_holder(info, source.absolute())
        if stat.S_ISLNK(info.st_mode):
            text = os.readlink(source.name, dir_fd=source.fd)
            if not target.stays_inside(target.parts, text):
                raise Refused(
                    "link_outside",
                    "is a symbolic link that would point outside "
                    "the folders you may use from its new place",
                    "target_path",
                )
        elif stat.S_ISDIR(info.st_mode):
            _links_stay(source, info, target)
        must_be_absent(target)
        try:
            os.rename(source.name, target.name, src_dir_fd=source.fd, dst_dir_fd=target.fd)
        except OSError as error:
            raise os_refusal(error, "target_path") from None
        return {"output": target.entry()}


MAX_MOVED = reader.MAX_SCAN
"""Most entries of a folder `mv` moves (each link in it is checked from its new place)."""


def _links_stay(source: Place, info: os.stat_result, target: Place) -> None:
    """Refused (`link_outside`, naming the link) when a symbolic link in the folder `source`
    would point outside the folders the user may use once the folder is at `target` (a
    relative link that stayed inside may leave from the new place), as `cp` checks each link
    it copies; `reserved` for the gateway's own files inside; `too_large` beyond MAX_MOVED
    entries. Checked before anything moves."""
    try:
        inner = source.area._open_folder(source.fd, source.name, len(source.parts) - 1)
    except reader.LinkMet:
        raise Refused("not_found", "", "path") from None
    try:
        if (os.fstat(inner).st_dev, os.fstat(inner).st_ino) != (info.st_dev, info.st_ino):
            raise Refused("not_found", "", "path")  # swapped meanwhile
        walker = Walker(inner)
    finally:
        os.close(inner)
    seen = 0
    with walker:
        for kind, name, entry in walker:
            if kind != "entry":
                continue
            seen += 1
            if seen > MAX_MOVED:
                raise Refused(
                    "too_large",
                    f"moves at most {MAX_MOVED} files and folders at "
                    "once (each link in them is checked); move its parts",
                    "path",
                )
            where = f"{source.absolute()}/{walker.relative(name)}"
            source.area.refuse_reserved(entry, where)
            if stat.S_ISLNK(entry.st_mode):
                text = os.readlink(name, dir_fd=walker.fd)
                if not target.stays_inside([*target.parts, *walker.parts, name], text):
                    raise Refused(
                        "link_outside",
                        f"{where[:300]} is a symbolic link to "
                        f"{text[:300]!r}, which would point outside the folders you "
                        "may use from its new place; nothing was moved",
                        "path",
                    )
            elif stat.S_ISDIR(entry.st_mode):
                walker.enter(name, entry)


# ---- cp ------------------------------------------------------------------------------------


class Budget:
    """What a copy may still make: files (links and folders count) and bytes."""

    def __init__(self, files: int, nbytes: int) -> None:
        self.files, self.bytes = files, nbytes
        self.max_files, self.max_bytes = files, nbytes

    def take(self, nbytes: int) -> None:
        self.files -= 1
        self.bytes -= nbytes
        if self.files < 0 or self.bytes < 0:
            raise Refused(
                "too_large",
                f"copies at most {self.max_files} files and folders "
                f"and {self.max_bytes} bytes at once",
                "path",
            )


def _scan(fd: int, budget: Budget, area: Area, where: str) -> None:
    """Count the tree in the open folder `fd` (`where`) against `budget` (links not
    followed), refusing it when it holds one of the gateway's own files or folders."""
    with Walker(fd) as walker:
        for kind, name, info in walker:
            if kind != "entry":
                continue
            area.refuse_reserved(info, f"{where}/{walker.relative(name)}")
            budget.take(info.st_size if stat.S_ISREG(info.st_mode) else 0)
            if stat.S_ISDIR(info.st_mode):
                walker.enter(name, info)


def reporter(request: dict[str, Any]) -> Any:
    """The request's progress callback (`_progress`: set by the file agent's worker,
    `supervisor.Report`, which sends progress lines and stops the work on a cancel),
    called with the counts `entries_done`, `entries_total`, `bytes_done`, `bytes_total`; it
    may raise to stop the work, which then removes what it wrote. A no-op when there is
    none."""
    report = request.get("_progress")
    return report if callable(report) else (lambda _counts: None)


# ---- results written under a hidden name, then moved into place -----------------------


def discard(parent: int, name: str, area: Area) -> None:
    """Remove the half-made `name` of `parent`: a file or link unlinked, a folder with what
    it holds (links unlinked, never followed)."""
    if not stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
        os.unlink(name, dir_fd=parent)
        return
    fd = os.open(name, DIRECTORY, dir_fd=parent)
    try:
        _remove_tree(area, fd, name)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


_RENAME_NOREPLACE = 1
"""renameat2's flag: fail with EEXIST rather than replace what has the new name."""


@cache
def _renameat2() -> Any:
    """The C library's `renameat2`, or None where there is none (not Linux, old glibc)."""
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int
    return function


def move_new(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
    """Rename `src` (in folder `src_fd`) to `dst` (in `dst_fd`), never replacing anything
    (FileExistsError when `dst` exists, even an empty folder, which plain `rename` would
    replace): `renameat2` with RENAME_NOREPLACE; where the system or the filesystem lacks
    it, a file or link is linked to its new name (which fails on any existing name) and
    unlinked from the old one, a folder made anew (`mkdir` fails the same way) and what it
    holds moved into it the same way."""
    function = _renameat2()
    if function is not None:
        if function(src_fd, os.fsencode(src), dst_fd, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(code, os.strerror(code), dst)
    info = os.stat(src, dir_fd=src_fd, follow_symlinks=False)
    if not stat.S_ISDIR(info.st_mode):
        os.link(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
        os.unlink(src, dir_fd=src_fd)
        return
    _move_tree(src_fd, src, info, dst_fd, dst)


def _move_tree(src_fd: int, src: str, info: os.stat_result, dst_fd: int, dst: str) -> None:
    """`move_new` of the folder `src` without `renameat2`: made anew at `dst` (`mkdir` fails
    on any existing name), what it holds moved in (files and links linked and unlinked,
    folders made anew the same way, iteratively: `reader.Walker`), each folder given its mode
    and the old one removed when done."""
    os.mkdir(dst, 0o700, dir_fd=dst_fd)
    inner = os.open(src, DIRECTORY, dir_fd=src_fd)
    try:
        walker = Walker(inner)
    finally:
        os.close(inner)
    with walker, _Made(dst_fd, dst, stat.S_IMODE(info.st_mode), made=True) as out:
        for kind, name, entry in walker:
            if kind == "leave":
                out.up()
                os.rmdir(name, dir_fd=walker.fd)
            elif stat.S_ISDIR(entry.st_mode):
                walker.enter(name, entry)
                out.down(name, stat.S_IMODE(entry.st_mode))
            else:
                os.link(name, name, src_dir_fd=walker.fd, dst_dir_fd=out.fd, follow_symlinks=False)
                os.unlink(name, dir_fd=walker.fd)
        out.finish()
    os.rmdir(src, dir_fd=src_fd)


class _Made:
    """A folder tree being written alongside a walk (`reader.Walker`) with one descriptor:
    `down` makes a folder (0700, so that what it holds can be written) and enters it, `up`
    gives the current one its mode and goes back up by `..` (checked to be the folder made
    above), `finish` gives the top its mode. `made`: the top is already there."""

    def __init__(self, parent: int, name: str, mode: int, *, made: bool = False) -> None:
        if not made:
            os.mkdir(name, 0o700, dir_fd=parent)
        self.fd = os.open(name, DIRECTORY, dir_fd=parent)
        self.stack = [(identity(os.fstat(self.fd)), mode)]

    def __enter__(self) -> _Made:
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self.fd)

    def down(self, name: str, mode: int) -> None:
        os.mkdir(name, 0o700, dir_fd=self.fd)
        inner = os.open(name, DIRECTORY, dir_fd=self.fd)
        os.close(self.fd)
        self.fd = inner
        self.stack.append((identity(os.fstat(inner)), mode))

    def up(self) -> None:
        os.fchmod(self.fd, self.stack.pop()[1])
        self.fd = _up(self.fd, self.stack[-1][0])

    def finish(self) -> None:
        os.fchmod(self.fd, self.stack.pop()[1])


WORK_PREFIX = ".iri-work-"
"""Start of the hidden name a `cp`, `compress` or `extract` writes under, beside its target,
until it is complete (then moved to the target's name, never replacing anything)."""


def work_name() -> str:
    """A new hidden name to write a result under (`reader.temporary_name`: it says which
    process writes, so that what a killed one left can be told from work going on)."""
    return reader.temporary_name(WORK_PREFIX)


def remove_stale_work(folder: int, area: Area) -> None:
    """Remove, in the open `folder`, the half-made results of writers of this host that were
    killed before they could (their process is gone; `reader.stale_names`)."""
    for name in reader.stale_names(folder, WORK_PREFIX):
        with contextlib.suppress(OSError, Refused):
            discard(folder, name, area)


class _Copy:
    """One `cp`: source descriptors in, target descriptors out, links checked (as from the
    target's place); written under the hidden `fresh` name beside the target, and what it
    made there (`made`) removed again if it does not finish."""

    def __init__(self, source: Place, target: Place, budget: Budget, report: Any) -> None:
        self.source, self.target, self.budget, self.report = source, target, budget, report
        self.fresh = work_name()
        self.made = False
        self.counts = {"entries_done": 0, "entries_total": 1, "bytes_done": 0, "bytes_total": 0}

    def tick(self, entries: int = 0, nbytes: int = 0) -> None:
        self.counts["entries_done"] += entries
        self.counts["bytes_done"] += nbytes
        self.report(self.counts)

    def discard(self) -> None:
        """Remove what this copy made (links unlinked, never followed)."""
        if self.made:
            discard(self.target.fd, self.fresh, self.target.area)

    def finish(self) -> None:
        """Give the complete copy the target's name (never replacing anything there)."""
        move_new(self.target.fd, self.fresh, self.target.fd, self.target.name)
        self.made = False

    def file(self, src: int, name: str, dst: int, new: str) -> None:
        """Copy the regular file `name` in folder `src` to the new `new` in folder `dst`."""
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return
            out = os.open(new, NEW_FILE, stat.S_IMODE(info.st_mode) & 0o777, dir_fd=dst)
            self.made = True
            try:
                while True:
                    chunk = os.read(fd, CHUNK)
                    if not chunk:
                        break
                    self.budget.bytes -= len(chunk)
                    if self.budget.bytes < 0:
                        self.budget.take(0)
                    os.write(out, chunk)
                    self.tick(nbytes=len(chunk))
            finally:
                os.close(out)
        finally:
            os.close(fd)

    def link(self, src: int, name: str, dst: int, new: str, parts: list[str]) -> None:
        text = os.readlink(name, dir_fd=src)
        if not self.target.stays_inside(parts, text):
            raise Refused(
                "link_outside",
                f"{name!r} is a symbolic link that would point "
                "outside the folders you may use from its new place; copy with "
                "`dereference` or copy what it points to",
                "path",
            )
        os.symlink(text, new, dir_fd=dst)
        self.made = True

    def folder(self, src: int, name: str, dst: int, new: str, parts: list[str]) -> None:
        """Copy the folder `name` of the open `src` to the new `new` in the open `dst`,
        iteratively (`reader.Walker` on the source; the copy is walked alongside, down by the
        names it made, up by `..`, each checked to be the folder made), each folder given its
        mode when done (made 0700 so that what it holds can be written)."""
        inner = os.open(name, DIRECTORY, dir_fd=src)
        try:
            mode = stat.S_IMODE(os.fstat(inner).st_mode) & 0o777
            walker = Walker(inner)
        finally:
            os.close(inner)
        self.made = True
        with walker, _Made(dst, new, mode) as out:
            for kind, child, info in walker:
                if kind == "leave":
                    out.up()
                    self.tick(entries=1)
                    continue
                where = [*parts, *walker.parts, child]
                self.source.area.refuse_reserved(
                    info, f"{self.source.absolute()}/{walker.relative(child)}"
                )
                self.budget.take(0)  # bytes are counted as they are copied
                if stat.S_ISREG(info.st_mode):
                    self.file(walker.fd, child, out.fd, child)
                elif stat.S_ISLNK(info.st_mode):
                    self.link(walker.fd, child, out.fd, child, where)
                elif stat.S_ISDIR(info.st_mode):
                    walker.enter(child, info)
                    out.down(child, stat.S_IMODE(info.st_mode) & 0o777)
                    continue
                self.tick(entries=1)
            out.finish()


def identity(info: os.stat_result) -> tuple[int, int]:
    """What names one file whatever path reached it (device, inode): a folder opened again
    is compared with what was checked."""
    return info.st_dev, info.st_ino


def _up(fd: int, expected: tuple[int, int]) -> int:
    """The folder holding the open folder `fd` (which is closed), checked to be `expected`."""
    outer = os.open("..", DIRECTORY, dir_fd=fd)
    if identity(os.fstat(outer)) != expected:
        os.close(outer)
        raise Refused(
            "changed", "a folder being written was moved meanwhile; nothing was kept", "target_path"
        )
    os.close(fd)
    return outer


def do_cp(request: dict[str, Any]) -> dict[str, Any]:
    follow = bool(request.get("dereference"))
    budget = Budget(int(request["max_files"]), int(request["max_bytes"]))
    with (
        Place(request["path"], "path", follow_final=follow) as source,
        Place(request["target"], "target_path") as target,
    ):
        info = must_exist(source)
        must_be_absent(target)
        if (
            source.area.base_parts + source.parts
            == (target.area.base_parts + target.parts)[
                : len(source.area.base_parts) + len(source.parts)
            ]
        ):
            raise Refused(
                "invalid", "lies inside `path`: a folder is not copied into itself", "target_path"
            )
        remove_stale_work(target.fd, target.area)
        copy = _Copy(source, target, budget, reporter(request))
        try:
            budget.take(info.st_size if stat.S_ISREG(info.st_mode) else 0)
            if stat.S_ISDIR(info.st_mode):
                inner = os.open(source.name, DIRECTORY, dir_fd=source.fd)
                try:
                    source.area._guard(os.fstat(inner))
                    _scan(inner, budget, source.area, source.absolute())
                finally:
                    os.close(inner)
                copy.counts["entries_total"] = budget.max_files - budget.files
                copy.counts["bytes_total"] = budget.max_bytes - budget.bytes
                counted = Budget(budget.max_files, budget.max_bytes)
                copy.budget = counted
                counted.take(0)
                copy.folder(source.fd, source.name, target.fd, copy.fresh, target.parts)
            elif stat.S_ISLNK(info.st_mode):
                copy.link(source.fd, source.name, target.fd, copy.fresh, target.parts)
            elif stat.S_ISREG(info.st_mode):
                copy.counts["bytes_total"] = info.st_size
                copy.file(source.fd, source.name, target.fd, copy.fresh)
            else:
                raise Refused("not_regular", "is not a regular file, folder or link", "path")
            copy.finish()
        except BaseException as error:
            with contextlib.suppress(OSError):  # the error that stopped it is the one to tell
                copy.discard()
            if isinstance(error, OSError):
                raise os_refusal(error, "target_path") from None
            raise
        return {"output": target.entry()}


# ---- chmod, chown --------------------------------------------------------------------------


def _change(
    request: dict[str, Any], field: str, change: Any, allowed: Any = lambda: None
) -> dict[str, Any]:
    """Apply `change(path)` to the file the place names (links inside followed), through a
    descriptor opened `O_PATH | O_NOFOLLOW` (so never to what a link swapped in points to);
    `allowed()` (which raises when the change is not) once the place is found."""
    with Place(request["path"], "path", follow_final=True) as place:
        allowed()
        try:
            fd = os.open(place.name, _PATH, dir_fd=place.fd)
        except OSError as error:
            raise os_refusal(error, "path") from None
        try:
            info = os.fstat(fd)
            if stat.S_ISLNK(info.st_mode):
                raise Refused("not_found", "", "path")  # swapped for a link meanwhile
            place.area._guard(info)
            place.area.refuse_holder(info, place.absolute())
            try:
                change(f"/proc/self/fd/{fd}")
            except OSError as error:
                raise os_refusal(error, field) from None
        finally:
            os.close(fd)
        return {"output": place.entry()}


SPECIAL_MODES = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX
"""setuid, setgid and sticky: refused unless the resource's profile allows them."""


def do_chmod(request: dict[str, Any]) -> dict[str, Any]:
    mode = int(str(request["mode"]), 8)

    def allowed() -> None:
        if mode & SPECIAL_MODES and not request.get("allow_special_modes"):
            raise _special_mode(str(request["mode"]))

    return _change(request, "mode", lambda path: os.chmod(path, mode), allowed)


def _special_mode(mode: str) -> Refused:
    return Refused(
        "special_mode",
        f"{mode[:20]} sets the setuid, setgid or sticky bit, which "
        "would let a program run with its owner's or group's rights (or change who "
        "may delete in a folder); give permissions only (at most 3 octal digits). "
        "A facility admin may allow these bits on the resource "
        "(`files.allow_special_modes: true` in its profile)",
        "mode",
    )


def _user_id(name: str) -> int:
    if not name:
        return -1
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        raise Refused("unknown_name", f"there is no user {name!r}", "owner") from None


def _group_id(name: str) -> int:
    if not name:
        return -1
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise Refused("unknown_name", f"there is no group {name!r}", "group") from None


def _allowed_owners() -> tuple[str, list[str]]:
    """The account this runs as and the groups it is in (names where known): all that
    `chown` may give a file to."""
    me = reader.Names()
    groups = sorted({os.getgid(), *os.getgroups()})
    return me.user(os.getuid()), [me.group(gid) for gid in groups]


def do_chown(request: dict[str, Any]) -> dict[str, Any]:
    """Give a file to the account this runs as (the one that runs the caller's jobs) and a
    group it is in; never to another user or group, which would hand them the file (and,
    where this runs as root, make files that act as another account)."""
    owner, group = str(request["owner"]), str(request["group"])
    uid, gid = _user_id(owner), _group_id(group)

    def allowed() -> None:
        user, groups = _allowed_owners()
        if uid not in (-1, os.getuid()):
            raise Refused(
                "not_allowed",
                f"owner {owner[:100]!r} is not the account that runs "
                f"your jobs here: a file may only be given to {user!r}",
                "owner",
            )
        if gid != -1 and gid not in {os.getgid(), *os.getgroups()}:
            raise Refused(
                "not_allowed",
                f"group {group[:100]!r} is not a group of the "
                f"account that runs your jobs here ({user!r}); offered: "
                f"{', '.join(groups)}",
                "group",
            )

    field = "owner" if uid != -1 else "group"
    return _change(request, field, lambda path: os.chown(path, uid, gid), allowed)


# ---- reads: checksum, file -----------------------------------------------------------------


def _open_read(request: dict[str, Any]) -> tuple[int, os.stat_result]:
    spec = request["path"]
    area = Area(str(spec["base"]), list(spec["top"]), list(spec["reserved"]))
    try:
        return area.open_file(list(spec["rest"]))
    finally:
        area.close()


def do_checksum(request: dict[str, Any]) -> dict[str, Any]:
    fd, _ = _open_read(request)
    digest = hashlib.sha256()
    try:
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                break
            digest.update(chunk)
    finally:
        os.close(fd)
    return {"output": {"algorithm": "SHA-256", "checksum": digest.hexdigest()}}


def do_file(request: dict[str, Any]) -> dict[str, Any]:
    spec = request["path"]
    area = Area(str(spec["base"]), list(spec["top"]), list(spec["reserved"]))
    try:
        fd, name, _ = area.resolve(list(spec["rest"]), follow_final=False)
        try:
            info = os.fstat(fd) if name is None else reader.lstat_at(fd, name)
            link = (
                os.readlink(name, dir_fd=fd)
                if name is not None and stat.S_ISLNK(info.st_mode)
                else None
            )
        finally:
            os.close(fd)
        if link is not None:
            return {"output": f"symbolic link to {link}"}
        if not stat.S_ISREG(info.st_mode):
            return {"output": _special(info.st_mode)}
        file_fd, info = area.open_file(list(spec["rest"]))
    finally:
        area.close()
    try:
        head = reader.read_at(file_fd, 0, MAGIC_BYTES)
    finally:
        os.close(file_fd)
    if not head:
        return {"output": "empty"}
    program = shutil.which("file")
    if program is None:
        raise Refused(
            "no_file_command",
            "the `file` command (libmagic) is not installed where the files are",
            "path",
        )
    done = subprocess.run(
        [program, "-b", "-"], input=head, capture_output=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise Refused("failed", done.stderr.decode("utf-8", "replace")[:200], "path")
    return {"output": done.stdout.decode("utf-8", "replace").strip()}


def _special(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "fifo (named pipe)"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "character special"
    if stat.S_ISBLK(mode):
        return "block special"
    return "unknown"


# ---- requests ------------------------------------------------------------------------------

OPERATIONS = {
    "mkdir": do_mkdir,
    "rm": do_rm,
    "mv": do_mv,
    "cp": do_cp,
    "chmod": do_chmod,
    "chown": do_chown,
    "symlink": do_symlink,
    "checksum": do_checksum,
    "file": do_file,
}


def serve(request: dict[str, Any], operations: dict[str, Any] | None = None) -> dict[str, Any]:
    """Answer one request (see the module docstring) with one of `operations` (these here
    unless given), in the reader's answer shape; never raises for a refused change."""
    operation = (OPERATIONS if operations is None else operations).get(str(request["op"]))
    if operation is None:
        raise ValueError(f"unknown operation {request['op']!r}")
    return reader.answer(lambda: operation(request))


if __name__ == "__main__":
    reader.main(serve)
