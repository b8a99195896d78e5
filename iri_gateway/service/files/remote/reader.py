"""The no-follow file reader: resolve a path once, without following links out, and read it.

This module is self-contained on purpose (standard library only, no imports from the
gateway): the gateway calls `serve` in-process when files are read as its own account, and
over SSH it sends this very file to the login node and runs it there with `python3 -I -c`,
as the user's mapped account, so that the operating system decides what may be read. The
request comes as one JSON object on stdin and the answer goes out as one JSON object on
stdout (file content in base64).

How a path is resolved. A request names a `base` folder (an admin-configured root, or the
gateway's job root: opened as it is, links and all, since an admin chose it), the `top`
components below it (a job folder's own name: opened without following links, ever), and the
`rest`, which the user chose. Every component below `base` is opened with `O_NOFOLLOW`,
relative to the descriptor of the folder above it, and everything is then read, listed or
stat-ed from the descriptors so opened; nothing is looked up by path a second time. A
symbolic link met on the way is read (`readlinkat`) and followed only when its target,
taken lexically, stays inside `base/top`; the walk then starts again from `base` with the
link replaced by its target (at most `MAX_LINKS` times). A file or folder whose identity
(device and inode) is one of the `reserved` ones (the gateway's own: its data directory,
store files, tokens file, job root, keys) is never entered, read or listed, whatever name
leads to it; every walk over a tree (`Walker`: iterative, one descriptor held however deep)
applies the same rule to each entry (`Area.refuse_reserved`), and a folder holding one of
them is never changed (`Area.refuse_holder`). A job that swaps a folder for a link between
two reads therefore gets one of two answers: the folder's content, or "not found"; never
what the link points to outside.

Operations: `stat`, `ls`, `head`, `tail`, `view` (the IRI filesystem operations) and
`range` (a job's output for the CLI and SDK). Errors are answers, not exceptions:
`{"ok": false, "error": KIND, "detail": ..., "field": ...}` with KIND one of `not_found`,
`directory`, `not_regular`, `window`.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import grp
import hashlib
import json
import os
import pwd
import secrets
import stat
import sys
from collections.abc import Callable
from typing import Any

MAX_LINKS = 40
"""Most symbolic links followed in one resolution (the kernel's own limit)."""
MAX_SCAN = 200_000
"""Most entries one listing examines (the answer says `truncated` beyond)."""
DEFAULT_LINES = 10

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_BASE = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class Refused(Exception):
    """The request cannot be served: `kind` says why (see the module docstring)."""

    def __init__(self, kind: str, detail: str = "", field: str = "") -> None:
        super().__init__(kind)
        self.kind, self.detail, self.field = kind, detail, field


class LinkMet(Exception):
    """A symbolic link at `index` of the components being walked, with its target."""

    def __init__(self, index: int, target: str) -> None:
        super().__init__(target)
        self.index, self.target = index, target


def checked_name(name: Any) -> str:
    """`name` as one component of a path (Refused `not_found` for an empty one, `.`, `..`,
    one with `/` or NUL): what every program here opens below a descriptor, never a path."""
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\0" in name:
        raise Refused("not_found")
    return name


def split_path(path: str) -> list[str]:
    """The components of `path`, without empty ones and `.` (`..` is kept: the walkers refuse
    or resolve it themselves)."""
    return [part for part in path.split("/") if part not in ("", ".")]


class Area:
    """Where a request may look: `base`, then `top` (never a link), then anything below."""

    def __init__(self, base: str, top: list[str], reserved: list[str]) -> None:
        if not base.startswith("/"):
            raise Refused("not_found")
        self.base_parts = split_path(base)
        self.top = [checked_name(name) for name in top]
        self.reserved, self.holders = _identities(reserved)
        try:
            self.base_fd = os.open(base, _BASE)
        except OSError:
            raise Refused("not_found") from None
        self._guard(os.fstat(self.base_fd), self.base_fd)

    def close(self) -> None:
        os.close(self.base_fd)

    def _guard(self, info: os.stat_result, fd: int | None = None) -> None:
        if (info.st_dev, info.st_ino) in self.reserved:
            if fd is not None:
                os.close(fd)
            raise Refused("not_found")

    def refuse_reserved(self, info: os.stat_result, where: str, field: str = "path") -> None:
        """Refused (`reserved`, naming `where`) when `info` is one of the gateway's own files
        or folders: the one rule every walk over a tree applies to every entry it meets (a
        path named directly is refused earlier, as not found)."""
        if (info.st_dev, info.st_ino) in self.reserved:
            raise Refused(
                "reserved",
                f"{where[:300]} is one of the gateway's own files or "
                "folders (its data, store, tokens, job folders or keys): nothing "
                "below a path you name may reach them, so nothing was done",
                field,
            )

    def refuse_holder(self, info: os.stat_result, where: str, field: str = "path") -> None:
        """Refused (`reserved`) when `info` is a folder holding one of the gateway's own files
        or folders at any depth (its mode, owner or name would cut the gateway off), or one
        of them itself."""
        self.refuse_reserved(info, where, field)
        if (info.st_dev, info.st_ino) in self.holders:
            raise Refused(
                "reserved",
                f"{where[:300]} holds the gateway's own files or folders "
                "(its data, store, tokens, job folders or keys): it cannot be "
                "removed, moved, or have its mode or owner changed",
                field,
            )

    # ---- resolution --------------------------------------------------------------------------

    def resolve(self, rest: list[str], follow_final: bool) -> tuple[int, str | None, list[str]]:
        """(descriptor of the folder holding the last component, its name, the components
        as resolved); the name is None when the path is the area itself. The caller closes
        the descriptor."""
        parts = self.top + [checked_name(name) for name in rest]
        for _ in range(MAX_LINKS + 1):
            try:
                fd, name = self._walk(parts, follow_final)
            except LinkMet as link:
                parts = self.splice(parts, link.index, link.target)
                continue
            return fd, name, parts
        raise Refused("not_found")

    def splice(self, parts: list[str], index: int, target: str) -> list[str]:
        """`parts` with the link at `index` replaced by `target`, lexically; Refused when
        the result leaves the area (or the link is the job folder itself)."""
        if index < len(self.top) or not target or "\0" in target:
            raise Refused("not_found")
        if target.startswith("/"):
            absolute = _normal(split_path(target), 0)
            inside = self.base_parts + self.top
            if absolute[: len(inside)] != inside:
                raise Refused("not_found")
            head = absolute[len(self.base_parts) :]
        else:
            head = parts[:index] + split_path(target)
        return _normal(head + parts[index + 1 :], len(self.top), self.top)

    def _walk(self, parts: list[str], follow_final: bool) -> tuple[int, str | None]:
        fd = os.dup(self.base_fd)
        try:
            for index, name in enumerate(parts[:-1]):
                inner = self._open_folder(fd, name, index)
                os.close(fd)
                fd = inner
            if not parts:
                return fd, None
            index, name = len(parts) - 1, parts[-1]
            info = lstat_at(fd, name)
            if stat.S_ISLNK(info.st_mode):
                if index < len(self.top):
                    raise Refused("not_found")
                if follow_final:
                    raise LinkMet(index, _readlink(fd, name))
            self._guard(info)
            return fd, name
        except BaseException:
            os.close(fd)
            raise

    def _open_folder(self, fd: int, name: str, index: int) -> int:
        """The folder `name` in `fd`, opened without following a link; LinkMet when it is one
        (below the top), Refused when it is anything else or reserved."""
        try:
            inner = os.open(name, _DIRECTORY, dir_fd=fd)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR) and index >= len(self.top):
                info = lstat_at(fd, name)
                if stat.S_ISLNK(info.st_mode):
                    raise LinkMet(index, _readlink(fd, name)) from None
            raise Refused("not_found") from None
        self._guard(os.fstat(inner), inner)
        return inner

    def open_file(self, rest: list[str]) -> tuple[int, os.stat_result]:
        """An open regular file (links inside followed) and its stat."""
        fd, name, _ = self.resolve(rest, follow_final=True)
        try:
            if name is None:
                raise Refused("directory")
            mode = lstat_at(fd, name).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                # Never opened: a FIFO would block, a device might act on being opened.
                raise Refused("directory" if stat.S_ISDIR(mode) else "not_regular")
            try:
                file_fd = os.open(name, _FILE, dir_fd=fd)
            except OSError as error:
                if error.errno == errno.EISDIR:
                    raise Refused("directory") from None
                raise Refused("not_found") from None
        finally:
            os.close(fd)
        info = os.fstat(file_fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(file_fd)
            raise Refused("directory" if stat.S_ISDIR(info.st_mode) else "not_regular")
        return file_fd, info

    def open_folder(self, rest: list[str]) -> tuple[int | None, os.stat_result, str | None]:
        """(descriptor of the folder, its stat, None) or, for anything else, (None, its
        lstat, its name) — links inside followed."""
        fd, name, _ = self.resolve(rest, follow_final=True)
        if name is None:
            return fd, os.fstat(fd), None
        try:
            info = lstat_at(fd, name)
            if not stat.S_ISDIR(info.st_mode):
                return None, info, name
            try:
                inner = self._open_folder(fd, name, len(self.top))
            except LinkMet:
                raise Refused("not_found") from None  # swapped for a link meanwhile
            return inner, os.fstat(inner), None
        finally:
            os.close(fd)


def _identities(paths: list[str]) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """(device, inode) of each of `paths` that exists (files and folders, links followed: the
    thing itself is reserved, whatever name leads to it), and of every folder that holds one
    of them (its real path's ancestors, up to '/')."""
    reserved: set[tuple[int, int]] = set()
    holders: set[tuple[int, int]] = set()
    for path in paths:
        try:
            info = os.stat(path)
            real = os.path.realpath(path)
        except (OSError, ValueError):
            continue
        reserved.add((info.st_dev, info.st_ino))
        while real != "/":
            real = os.path.dirname(real)
            try:
                above = os.stat(real)
            except OSError:
                break
            holders.add((above.st_dev, above.st_ino))
    return reserved, holders


def _normal(parts: list[str], floor: int, top: list[str] | None = None) -> list[str]:
    """`parts` with '..' applied lexically; Refused when it climbs above `floor` components
    (or the first `floor` components are no longer `top`)."""
    out: list[str] = []
    for part in parts:
        if part == "..":
            if len(out) <= floor:
                raise Refused("not_found")
            out.pop()
        elif part not in ("", "."):
            out.append(part)
    if top is not None and out[: len(top)] != top:
        raise Refused("not_found")
    return out


def lstat_at(fd: int, name: str) -> os.stat_result:
    """`name` in the folder `fd`, not followed if it is a link; Refused `not_found` when it
    cannot be looked at (the same answer as a missing name, on purpose)."""
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        raise Refused("not_found") from None


def _readlink(fd: int, name: str) -> str:
    try:
        return os.readlink(name, dir_fd=fd)
    except OSError:
        raise Refused("not_found") from None


# ---- reading -------------------------------------------------------------------------------


def read_at(fd: int, offset: int, length: int) -> bytes:
    """Up to `length` bytes of `fd` from `offset` (fewer only at the end of the file), without
    moving its offset: a file is read through the descriptor that was checked."""
    chunks: list[bytes] = []
    while length > 0:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(chunks)


def _lines(data: bytes) -> list[bytes]:
    """Lines as `head -n` counts them: each with its newline; a last unterminated one too."""
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def _whole_lines(data: bytes, cut: bool) -> bytes:
    """A part the limit cut short ends with its last whole line (if it has one)."""
    if cut and b"\n" in data and not data.endswith(b"\n"):
        return data[: data.rindex(b"\n") + 1]
    return data


def _part(kind: str, data: bytes, start: int, size: int, truncated: bool) -> dict[str, Any]:
    return {
        "kind": kind,
        "data": base64.b64encode(data).decode("ascii"),
        "start": start,
        "size": size,
        "truncated": truncated,
    }


def _window(lines: int, where: str, limit: int) -> Refused:
    return Refused(
        "window", f"the {where} {lines} lines span more than {limit} bytes; use bytes", "lines"
    )


def head(fd: int, size: int, request: dict[str, Any]) -> dict[str, Any]:
    limit = int(request["limit"])
    nbytes, lines, skip = request.get("bytes"), request.get("lines"), bool(request.get("skip"))
    if nbytes is not None:
        end = max(size - nbytes, 0) if skip else min(nbytes, size)
        length = min(end, limit)
        return _part("bytes", read_at(fd, 0, length), 0, size, length < end)
    lines = DEFAULT_LINES if lines is None else int(lines)
    if skip:
        window = min(size, limit)
        last = _lines(read_at(fd, size - window, window))
        if lines == 0:
            cut = size
        elif len(last) > lines or window == size:
            cut = size - len(b"".join(last[max(len(last) - lines, 0) :]))
        else:
            raise _window(lines, "last", limit)
        length = min(cut, limit)
        data = _whole_lines(read_at(fd, 0, length), length < cut)
        return _part("lines", data, 0, size, length < cut)
    kept = _lines(read_at(fd, 0, min(size, limit)))[:lines]
    complete = size <= limit or (len(kept) == lines and (not kept or kept[-1].endswith(b"\n")))
    if not complete and len(kept) > 1 and not kept[-1].endswith(b"\n"):
        kept.pop()  # the window cut this line: only whole lines, unless there is just one
    return _part("lines", b"".join(kept), 0, size, not complete)


def tail(fd: int, size: int, request: dict[str, Any]) -> dict[str, Any]:
    limit = int(request["limit"])
    nbytes, lines, skip = request.get("bytes"), request.get("lines"), bool(request.get("skip"))
    if nbytes is not None:
        start = min(nbytes, size) if skip else max(size - nbytes, 0)
        length = min(size - start, limit)
        return _part("bytes", read_at(fd, start, length), start, size, start + length < size)
    lines = DEFAULT_LINES if lines is None else int(lines)
    if skip:
        first = _lines(read_at(fd, 0, min(size, limit)))
        if len(first) > lines or size <= limit:
            start = min(len(b"".join(first[:lines])), size)
        else:
            raise _window(lines, "first", limit)
        length = min(size - start, limit)
        data = _whole_lines(read_at(fd, start, length), start + length < size)
        return _part("lines", data, start, size, start + length < size)
    window = min(size, limit)
    kept = _lines(read_at(fd, size - window, window))
    complete = len(kept) > lines or window == size
    # Without the whole file, the window's first line may be cut: only whole lines are
    # shown, unless there is just one.
    data = b"".join(kept[-lines:] if complete else kept[1:] or kept)
    return _part("lines", data, size - len(data), size, not complete)


def view(fd: int, size: int, request: dict[str, Any]) -> dict[str, Any]:
    start = min(int(request["offset"]), size)
    length = min(int(request["size"]), size - start)
    return _part("bytes", read_at(fd, start, length), start, size, False)


def byte_range(fd: int, size: int, request: dict[str, Any]) -> dict[str, Any]:
    """The last `tail` bytes, the first `head` bytes, or `length` bytes from `offset`."""
    if request.get("tail") is not None:
        start = max(size - int(request["tail"]), 0)
        length = size - start
    elif request.get("head") is not None:
        start, length = 0, min(int(request["head"]), size)
    else:
        start = min(int(request.get("offset") or 0), size)
        wanted = request.get("length")
        length = size - start if wanted is None else min(int(wanted), size - start)
    if request.get("limit") is not None:
        length = min(length, int(request["limit"]))
    return _part("bytes", read_at(fd, start, length), start, size, start + length < size)


# ---- stat and listing ----------------------------------------------------------------------


def _stat_fields(info: os.stat_result) -> dict[str, int]:
    return {
        "mode": info.st_mode,
        "ino": info.st_ino,
        "dev": info.st_dev,
        "nlink": info.st_nlink,
        "uid": info.st_uid,
        "gid": info.st_gid,
        "size": info.st_size,
        "atime": int(info.st_atime),
        "ctime": int(info.st_ctime),
        "mtime": int(info.st_mtime),
    }


def do_stat(area: Area, request: dict[str, Any]) -> dict[str, Any]:
    rest = list(request["rest"])
    fd, name, parts = area.resolve(rest, follow_final=bool(request.get("dereference")))
    try:
        if name is None:
            return _stat_fields(os.fstat(fd))
        info = lstat_at(fd, name)
        if stat.S_ISLNK(info.st_mode):
            # The link itself is shown only when its target stays inside (lexically).
            area.splice(parts, len(parts) - 1, _readlink(fd, name))
        return _stat_fields(info)
    finally:
        os.close(fd)


class Names:
    """User and group names by id, looked up once per request."""

    def __init__(self) -> None:
        self.users: dict[int, str] = {}
        self.groups: dict[int, str] = {}

    def user(self, uid: int) -> str:
        if uid not in self.users:
            try:
                self.users[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                self.users[uid] = str(uid)
        return self.users[uid]

    def group(self, gid: int) -> str:
        if gid not in self.groups:
            try:
                self.groups[gid] = grp.getgrgid(gid).gr_name
            except KeyError:
                self.groups[gid] = str(gid)
        return self.groups[gid]


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    return "symlink" if stat.S_ISLNK(mode) else "other"


def entry_of(name: str, info: os.stat_result, link: str | None, names: Names) -> dict[str, Any]:
    """One listing entry as every program here describes a file (`ls` and the writer's
    answers alike): name, kind, link target, mode, owner and group (ids and names), size
    and modification time."""
    return {
        "name": name,
        "kind": _kind(info.st_mode),
        "link": link,
        "mode": info.st_mode,
        "uid": info.st_uid,
        "gid": info.st_gid,
        "user": names.user(info.st_uid),
        "group": names.group(info.st_gid),
        "size": info.st_size,
        "mtime": info.st_mtime,
    }


def do_ls(area: Area, request: dict[str, Any]) -> dict[str, Any]:
    rest = list(request["rest"])
    names = Names()
    fd, info, name = area.open_folder(rest)
    if fd is None:
        return {
            "entries": [entry_of(name or "", info, None, names)],
            "truncated": False,
            "folder": False,
        }
    found: list[tuple[str, os.stat_result, str | None]] = []
    try:
        complete = _scan(
            area, fd, "", bool(request.get("recursive")), bool(request.get("hidden")), found
        )
    finally:
        os.close(fd)
    found.sort(key=lambda item: item[0])
    limit = int(request["max_entries"])
    truncated = len(found) > limit or not complete
    found = found[:limit]
    entries = [entry_of(rel, st, link, names) for rel, st, link in found]
    if request.get("dereference"):
        budget = int(request["max_dereference"])
        for index, (rel, _, link) in enumerate(found):
            if link is None or budget <= 0:
                continue
            budget -= 1
            target = _dereferenced(area, rest + rel.split("/"))
            if target is not None:
                entries[index] = entry_of(rel, target, link, names)
    return {"entries": entries, "truncated": truncated, "folder": True}


def _scan(
    area: Area,
    fd: int,
    prefix: str,
    recursive: bool,
    hidden: bool,
    found: list[tuple[str, os.stat_result, str | None]],
) -> bool:
    """Entries below the open folder `fd` (depth first, `Walker`); False when MAX_SCAN
    stopped it. The gateway's own files and folders are left out of a listing (not refused:
    a listing of the folder holding them shows the rest)."""
    walker = Walker(fd, unreadable_empty=True)
    try:
        for kind, name, info in walker:
            if kind != "entry" or (not hidden and name.startswith(".")):
                continue
            if len(found) >= MAX_SCAN:
                return False
            if (info.st_dev, info.st_ino) in area.reserved:
                continue
            link = None
            if stat.S_ISLNK(info.st_mode):
                try:
                    link = os.readlink(name, dir_fd=walker.fd)
                except OSError:
                    link = ""
            found.append((prefix + walker.relative(name), info, link))
            if recursive and stat.S_ISDIR(info.st_mode):
                with contextlib.suppress(OSError, Refused):
                    walker.enter(name, info)
    finally:
        walker.close()
    return True


class Walker:
    """A depth-first walk below an open folder, iterative (an explicit stack: no recursion
    limit, however deep the tree) and holding one descriptor however deep it goes.

    Iterating gives `("entry", name, lstat)` for each name of the current folder (never
    following a link), and `("leave", name, lstat)` when a folder entered is done (the walk
    is then back in the folder holding it). After an entry that is a folder, `enter(name,
    info)` goes into it: the next entries are its own. `fd` is the current folder's
    descriptor (valid until the next step), `parts` the names from the walk's top to it.

    Why one descriptor: holding one per level would run out of descriptors in a tree 10,000
    folders deep. A folder is entered with `O_NOFOLLOW` relative to the one above, and left
    by opening its `..`; both are checked to be the very folder (device and inode) seen on
    the way down, so a folder moved or swapped for a link meanwhile stops the walk
    (`Refused("changed")`) instead of leading it elsewhere.
    """

    def __init__(self, fd: int, *, sort: bool = False, unreadable_empty: bool = False) -> None:
        self.fd = os.dup(fd)
        self.sort, self.unreadable_empty = sort, unreadable_empty
        self.parts: list[str] = []
        self._levels: list[tuple[list[str], int, tuple[int, int], os.stat_result | None]] = []
        try:
            self._push(os.fstat(self.fd), None)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Walker:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __iter__(self) -> Walker:
        return self

    def relative(self, name: str) -> str:
        """`name` of the current folder as a path from the walk's top."""
        return "/".join([*self.parts, name])

    def _names(self, fd: int) -> list[str]:
        try:
            with os.scandir(fd) as listing:
                names = [entry.name for entry in listing]
        except OSError:
            if not self.unreadable_empty:
                raise
            names = []
        return sorted(names) if self.sort else names

    def _push(self, info: os.stat_result, entered: os.stat_result | None) -> None:
        self._levels.append((self._names(self.fd), 0, (info.st_dev, info.st_ino), entered))

    def __next__(self) -> tuple[str, str, os.stat_result]:
        while self._levels:
            names, index, identity, entered = self._levels[-1]
            if index < len(names):
                self._levels[-1] = (names, index + 1, identity, entered)
                name = names[index]
                try:
                    info = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone meanwhile
                return "entry", name, info
            self._levels.pop()
            if not self._levels:
                break
            left = self.parts.pop()
            self._up(self._levels[-1][2])
            assert entered is not None
            return "leave", left, entered
        raise StopIteration

    def enter(self, name: str, info: os.stat_result) -> None:
        """Go into the folder `name` of the current folder, which `info` described (OSError
        when it is no longer a folder, `Refused("changed")` when it is another one)."""
        inner = os.open(name, _DIRECTORY, dir_fd=self.fd)
        opened = os.fstat(inner)
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
            os.close(inner)
            raise Refused(
                "changed",
                f"{self.relative(name)[:300]} was replaced while it was "
                "being walked; nothing more was done",
                "path",
            )
        try:
            names = self._names(inner)
        except BaseException:
            os.close(inner)
            raise
        os.close(self.fd)
        self.fd = inner
        self.parts.append(name)
        self._levels.append((names, 0, (opened.st_dev, opened.st_ino), info))

    def _up(self, identity: tuple[int, int]) -> None:
        outer = os.open("..", _DIRECTORY, dir_fd=self.fd)
        opened = os.fstat(outer)
        os.close(self.fd)
        self.fd = outer
        if (opened.st_dev, opened.st_ino) != identity:
            raise Refused(
                "changed",
                f"{'/'.join(self.parts)[:300] or 'the folder'} was moved "
                "while it was being walked; nothing more was done",
                "path",
            )


def _dereferenced(area: Area, parts: list[str]) -> os.stat_result | None:
    """What the link at `parts` points to, when that stays inside; None otherwise."""
    try:
        fd, name, _ = area.resolve(parts, follow_final=True)
    except Refused:
        return None
    try:
        return os.fstat(fd) if name is None else lstat_at(fd, name)
    except Refused:
        return None
    finally:
        os.close(fd)


# ---- who writes (for the writers built on this module) ----------------------------------


def writer_host() -> str | None:
    """This boot of this machine and its process-id namespace, as 12 hex digits (None where
    the kernel does not say: then no temporary name is ever judged stale)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot:
            boot_id = boot.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return hashlib.sha256(f"{boot_id} {namespace}".encode()).hexdigest()[:12]


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # alive, another account's
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether `pid` has exited and only waits to be reaped (a zombie writes nothing more; a
    container's first process may never reap the orphans of a killed agent)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False  # no /proc to ask: taken as alive (never removing a live writer's work)
    return state in ("Z", "X")


def temporary_name(prefix: str) -> str:
    """A new hidden name that says who writes under it: `<prefix><host>-<pid>-<random>`
    (`writer_host`, this process), or `<prefix><random>` where the host is unknown."""
    host = writer_host()
    token = secrets.token_hex(8)
    return f"{prefix}{host}-{os.getpid()}-{token}" if host else prefix + token


def stale_names(folder: int, prefix: str) -> list[str]:
    """The `temporary_name`s of `prefix` in the open `folder` whose writer was of this host
    and is gone (killed before it could clean up): never another machine's or boot's, nor
    one whose process lives."""
    host = writer_host()
    if host is None:
        return []
    try:
        with os.scandir(folder) as listing:
            names = [entry.name for entry in listing if entry.name.startswith(prefix)]
    except OSError:
        return []  # a folder the account may write but not list: nothing judged
    stale = []
    for name in names:
        owner = name[len(prefix) :].split("-")
        if (
            len(owner) == 3
            and owner[0] == host
            and owner[1].isdigit()
            and not _alive(int(owner[1]))
        ):
            stale.append(name)
    return stale


# ---- requests ------------------------------------------------------------------------------

_READS = {"head": head, "tail": tail, "view": view, "range": byte_range}


def answer(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`work()`'s result as an answer (`{"ok": true, "result": ...}`), or its refusal
    (`{"ok": false, "error", "detail", "field"}`): the shape every program here answers in
    (the writer and the archiver too)."""
    try:
        result = work()
    except Refused as refused:
        return {
            "ok": False,
            "error": refused.kind,
            "detail": refused.detail,
            "field": refused.field,
        }
    return {"ok": True, "result": result}


def _serve(request: dict[str, Any]) -> dict[str, Any]:
    area = Area(str(request["base"]), list(request["top"]), list(request["reserved"]))
    try:
        operation = request["op"]
        if operation == "stat":
            return do_stat(area, request)
        if operation == "ls":
            return do_ls(area, request)
        if operation in _READS:
            fd, info = area.open_file(list(request["rest"]))
            try:
                return _READS[operation](fd, info.st_size, request)
            finally:
                os.close(fd)
        raise ValueError(f"unknown operation {operation!r}")
    finally:
        area.close()


def serve(request: dict[str, Any]) -> dict[str, Any]:
    """Answer one request (see the module docstring); never raises for a refused path."""
    return answer(lambda: _serve(request))


def main(serve_one: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
    """One JSON request on stdin, one JSON answer on stdout (answered by `serve_one`: this
    module's `serve` unless given, the writer's and the archiver's when they run)."""
    reply = (serve if serve_one is None else serve_one)(json.loads(sys.stdin.read()))
    sys.stdout.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
