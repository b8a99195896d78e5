"""`compress` and `extract`: tar archives (uncompressed, gzip, bzip2 or xz) made and unpacked
where the files are, through the writer's no-follow places (`writer.Place`).

Sent and run like the writer (this module, the writer and the reader go to the login node
together and run as the mapped account; `serve` answers the writer's requests and these two).

`compress` walks the source through descriptors opened `O_NOFOLLOW`, never leaving it: a
symbolic link is stored as a link (its text; nothing it points to is read), and `dereference`
is refused. The tree is counted first against `max_files` and `max_bytes` (`too_large`), the
archive is written under a hidden `writer.work_name` beside the target, removed again if
anything fails, and given the target's name only when complete (`writer.move_new`: an
existing target is never replaced).

`extract` first bounds every header before `tarfile` parses one (`tarheaders`: extended
headers, PAX records, numbers, names; refused naming the header, its offset and the bound),
then reads the archive's headers and refuses the whole archive, naming the member,
when one is absolute, has a `..` component, a control character in its name or link, is a
device or fifo, is a symbolic link that is absolute or has a `..` component (so that no chain
of links can climb out of the extracted folder, a link may only point down), or is a hard
link to anything but an earlier file member; when there are more than `max_files` members or
they declare more than `max_bytes` (`too_large`; the folders member names imply count as
entries). A `.` folder member (`tar -C d -c .`) stands for the target itself, `./x` for
`x`. It then unpacks into a fresh hidden folder next to the target, walking every member's
folders `O_NOFOLLOW` from that folder (so a link member is never gone through), counting the
bytes actually written, and
renames the folder to the target only when all is done: a failed extract leaves nothing.
When the target is an existing folder, the members land inside it (`Into`): every name they
add at its top is checked free first (`exists`, naming it), the fresh folder is made inside
it, and each top-level name is moved in when all is unpacked. Every such move refuses to
replace anything, even an empty folder made that instant (`writer.move_new`: `renameat2` with
RENAME_NOREPLACE), and a name taken meanwhile undoes the moves made: refused, the folder as
it was.
"""

from __future__ import annotations

import contextlib
import lzma
import os
import re
import stat
import tarfile
import zlib
from collections.abc import Iterator
from typing import IO, Any

from iri_gateway.service.files.remote import reader, supervisor, tarheaders, writer
from iri_gateway.service.files.remote.reader import Area, Refused
from iri_gateway.service.files.remote.writer import Place

MODES = {"none": "", "gzip": "gz", "bzip2": "bz2", "xz": "xz"}
"""The compression types (the last part of `urn:doe-iri:compression:<type>`) and tarfile's
word for each."""


def _open_tar(stream: IO[bytes], mode: str) -> tarfile.TarFile:
    """`tarfile.open` on an open stream (PAX headers when writing: long names and big
    files); the mode is chosen at run time, which its typed overloads do not cover."""
    opener: Any = tarfile.open
    tar: tarfile.TarFile = opener(fileobj=stream, mode=mode, format=tarfile.PAX_FORMAT)
    return tar


_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _mode(request: dict[str, Any]) -> str:
    kind = str(request.get("compression", "gzip"))
    if kind not in MODES:
        raise Refused(
            "invalid", f"unknown compression {kind!r}; offered: " + ", ".join(MODES), "compression"
        )
    return MODES[kind]


# ---- compress ------------------------------------------------------------------------------


class _Packer:
    """One `compress`: what to store (`pattern` over paths relative to the source), the
    budget, and the archive's own file (never stored in itself). The tree is walked twice
    the same way: counted (`count`: totals, and `too_large` before a byte is written), then
    stored into the open archive (`pack`), reporting progress against those totals."""

    def __init__(
        self, budget: writer.Budget, pattern: str | None, report: Any, source: Place
    ) -> None:
        self.budget, self.report, self.source = budget, report, source
        self.pattern = re.compile(pattern) if pattern else None
        self.skip = (-1, -1)
        self.counts = {"entries_done": 0, "entries_total": 0, "bytes_done": 0, "bytes_total": 0}

    def stored(self, nbytes: int) -> None:
        self.counts["entries_done"] += 1
        self.counts["bytes_done"] += nbytes
        self.report(self.counts)

    def wanted(self, relative: str) -> bool:
        return self.pattern is None or self.pattern.search(relative) is not None

    def count(self, folder: int, name: str) -> None:
        """Count what `pack` would store (sizes as they are now) into the totals, against
        the budget; refused when the tree holds one of the gateway's own files or folders
        (`Area.refuse_reserved`), before anything is written."""
        for _, _, relative, info in self._tree(folder, name):
            if stat.S_ISDIR(info.st_mode):
                self.budget.take(0)
                self.counts["entries_total"] += 1
            elif self.wanted(relative) and (
                stat.S_ISLNK(info.st_mode) or stat.S_ISREG(info.st_mode)
            ):
                size = info.st_size if stat.S_ISREG(info.st_mode) else 0
                self.budget.take(size)
                self.counts["entries_total"] += 1
                self.counts["bytes_total"] += size

    def _tree(self, folder: int, name: str) -> Iterator[tuple[int, str, str, os.stat_result]]:
        """(open folder, name, path relative to the top, lstat) of `name` of `folder` and,
        when it is a folder, of everything below it (depth first, sorted, iteratively:
        `reader.Walker`); the archive's own file (`skip`) left out."""
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        if (info.st_dev, info.st_ino) == self.skip:
            return
        yield folder, name, "", info
        if not stat.S_ISDIR(info.st_mode):
            return
        inner = os.open(name, writer.DIRECTORY, dir_fd=folder)
        try:
            if writer.identity(os.fstat(inner)) != writer.identity(info):
                raise Refused("not_found", "", "path")  # swapped meanwhile
            walker = reader.Walker(inner, sort=True)
        finally:
            os.close(inner)
        with walker:
            for kind, child, entry in walker:
                if kind != "entry" or (entry.st_dev, entry.st_ino) == self.skip:
                    continue
                relative = walker.relative(child)
                self.source.area.refuse_reserved(entry, f"{self.source.absolute()}/{relative}")
                yield walker.fd, child, relative, entry
                if stat.S_ISDIR(entry.st_mode):
                    walker.enter(child, entry)

    def pack(self, tar: tarfile.TarFile, skip: tuple[int, int], folder: int, name: str) -> None:
        """Store the counted tree (`name` of the open `folder`) into `tar`, the archive file
        `skip` (device, inode) left out, against the budget again (files may have grown)."""
        self.skip = skip
        self.budget = writer.Budget(self.budget.max_files, self.budget.max_bytes)
        for inner, child, relative, info in self._tree(folder, name):
            self.entry(
                tar, inner, child, f"{name}/{relative}" if relative else name, relative, info
            )

    def entry(
        self,
        tar: tarfile.TarFile,
        folder: int,
        name: str,
        arcname: str,
        relative: str,
        info: os.stat_result,
    ) -> None:
        """Store `name` of the open `folder` (`info`) as `arcname` (a folder alone: `pack`
        stores what it holds after it)."""
        member = tarfile.TarInfo(arcname)
        member.mode, member.mtime = stat.S_IMODE(info.st_mode) & 0o777, int(info.st_mtime)
        if stat.S_ISDIR(info.st_mode):
            self.budget.take(0)
            member.type = tarfile.DIRTYPE
            tar.addfile(member)
            self.stored(0)
        elif not self.wanted(relative):
            return
        elif stat.S_ISLNK(info.st_mode):
            self.budget.take(0)
            member.type, member.linkname = tarfile.SYMTYPE, os.readlink(name, dir_fd=folder)
            tar.addfile(member)
            self.stored(0)
        elif stat.S_ISREG(info.st_mode):
            fd = os.open(name, _READ, dir_fd=folder)
            with os.fdopen(fd, "rb") as content:
                opened = os.fstat(content.fileno())
                if not stat.S_ISREG(opened.st_mode):
                    return  # swapped for something else meanwhile
                self.budget.take(opened.st_size)
                member.size = opened.st_size
                tar.addfile(member, content)
                self.stored(opened.st_size)


def do_compress(request: dict[str, Any]) -> dict[str, Any]:
    if request.get("dereference"):
        raise Refused(
            "invalid",
            "is not offered: symbolic links are stored as links, never followed",
            "dereference",
        )
    mode = _mode(request)
    budget = writer.Budget(int(request["max_files"]), int(request["max_bytes"]))
    with (
        Place(request["path"], "path") as source,
        Place(request["target"], "target_path") as target,
    ):
        writer.must_exist(source)
        writer.must_be_absent(target)
        packer = _Packer(budget, request.get("match_pattern"), writer.reporter(request), source)
        packer.count(source.fd, source.name)
        writer.remove_stale_work(target.fd, target.area)
        fresh = writer.work_name()
        try:
            out = os.open(fresh, writer.NEW_FILE, 0o644, dir_fd=target.fd)
        except OSError as error:
            raise writer.os_refusal(error, "target_path") from None
        try:
            made = os.fstat(out)
            with (
                os.fdopen(out, "wb") as stream,
                _open_tar(stream, f"w:{mode}" if mode else "w") as tar,
            ):
                packer.pack(tar, (made.st_dev, made.st_ino), source.fd, source.name)
        except BaseException as error:
            os.unlink(fresh, dir_fd=target.fd)
            if isinstance(error, OSError):
                raise writer.os_refusal(error, "path") from None
            raise
        try:
            writer.move_new(target.fd, fresh, target.fd, target.name)
        except OSError as error:
            os.unlink(fresh, dir_fd=target.fd)
            raise writer.os_refusal(error, "target_path") from None
        return {"output": target.entry()}


# ---- extract -------------------------------------------------------------------------------


def _bad(member: str, reason: str) -> Refused:
    return Refused("bad_member", f"member {member[:200]!r} {reason}; nothing was extracted", "path")


def _member_parts(name: str, what: str = "") -> list[str]:
    """The components of a member name (or a link's text, `what`), refused when it would
    not stay inside: absolute, `..`, control characters."""
    shown = what or name
    if any(ord(c) < 32 or ord(c) == 127 for c in shown):
        raise _bad(name, "has a control character (such as a newline) in its name or link")
    if shown.startswith("/"):
        raise _bad(name, "is absolute" if not what else "is a link to an absolute path")
    parts = [part for part in shown.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise _bad(
            name,
            "has a `..` component"
            if not what
            else "is a link with a `..` "
            "component (links in an archive may only point down from their folder)",
        )
    if not parts and not what:
        raise _bad(name, "has an empty name")
    return parts


def _check(member: tarfile.TarInfo, files: set[str]) -> list[str]:
    """`member`'s components, or the refusal naming it; none for the folder `.` (or `./`)
    itself, which an archive made with `tar -C folder -c .` begins with: it stands for the
    target folder, which extract makes (its mode is not taken)."""
    if (
        member.isdir()
        and not [part for part in member.name.split("/") if part not in ("", ".")]
        and not member.name.startswith("/")
    ):
        return []
    parts = _member_parts(member.name)
    if member.issym():
        _member_parts(member.name, member.linkname)
    elif member.islnk():
        if "/".join(_member_parts(member.name, member.linkname)) not in files:
            raise _bad(
                member.name,
                "is a hard link to something that is not an earlier file of the archive",
            )
    elif member.isfile():
        files.add("/".join(parts))
    elif not member.isdir():
        raise _bad(member.name, "is a device, fifo or other special file")
    return parts


class _Unpacker:
    """Members written below the open, fresh folder `root`, their folders walked
    `O_NOFOLLOW` (made when missing), bytes counted as written."""

    def __init__(self, tar: tarfile.TarFile, root: int, budget: writer.Budget, report: Any) -> None:
        self.tar, self.root, self.budget, self.report = tar, root, budget, report
        self.modes: list[tuple[str, list[str], int]] = []
        self.counts = {"entries_done": 0, "entries_total": 0, "bytes_done": 0, "bytes_total": 0}

    def folder(self, member: str, parts: list[str]) -> int:
        fd = os.dup(self.root)
        try:
            for part in parts:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
                try:
                    inner = os.open(part, writer.DIRECTORY, dir_fd=fd)
                except OSError:
                    raise _bad(member, "would be written through a link or a file") from None
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
        return fd

    def member(self, member: tarfile.TarInfo, parts: list[str]) -> None:
        mode = member.mode & 0o777
        if member.isdir():
            os.close(self.folder(member.name, parts))
            self.modes.append((member.name, parts, mode))
            return
        fd = self.folder(member.name, parts[:-1])
        name = parts[-1]
        try:
            if member.issym():
                os.symlink(member.linkname, name, dir_fd=fd)
            elif member.islnk():
                source = _member_parts(member.name, member.linkname)
                src = self.folder(member.name, source[:-1])
                try:
                    os.link(source[-1], name, src_dir_fd=src, dst_dir_fd=fd, follow_symlinks=False)
                finally:
                    os.close(src)
            else:
                content = self.tar.extractfile(member)
                assert content is not None
                self.write(member.name, content, fd, name, mode)
        except FileExistsError:
            raise _bad(member.name, "appears twice") from None
        finally:
            os.close(fd)

    def finish(self) -> None:
        """Give the folders their modes, deepest first (they were made writable, 0700, so
        that what they hold could be written)."""
        for name, parts, mode in reversed(self.modes):
            fd = self.folder(name, parts)
            try:
                os.fchmod(fd, mode)
            finally:
                os.close(fd)

    def write(self, member: str, content: IO[bytes], folder: int, name: str, mode: int) -> None:
        out = os.open(name, writer.NEW_FILE, 0o600, dir_fd=folder)
        try:
            while chunk := content.read(writer.CHUNK):
                self.budget.bytes -= len(chunk)
                if self.budget.bytes < 0:
                    raise Refused(
                        "too_large",
                        f"member {member[:200]!r} goes beyond the "
                        f"{self.budget.max_bytes} bytes one extract may write; "
                        "nothing was extracted",
                        "path",
                    )
                os.write(out, chunk)
                self.counts["bytes_done"] += len(chunk)
                self.report(self.counts)
            os.fchmod(out, mode)
        finally:
            os.close(out)


def _members(
    tar: tarfile.TarFile, budget: writer.Budget
) -> list[tuple[tarfile.TarInfo, list[str]]]:
    """Every member, checked and counted, before anything is written. The folders a member's
    name implies (`d` and `d/e` for `d/e/f`) count as entries too, each once: they are made."""
    found, files = [], set[str]()
    folders: dict[str, Any] = {}
    while (member := tar.next()) is not None:
        try:
            budget.take(member.size if member.isfile() else 0)
            parts = _check(member, files)
            node = folders
            for part in parts[:-1] if not member.isdir() else parts:
                if part not in node:
                    node[part] = {}
                    budget.take(0)
                node = node[part]
        except Refused as refused:
            if refused.kind != "too_large":
                raise
            raise Refused(
                "too_large",
                f"has more than {budget.max_files} members and folders "
                f"they imply, or declares more than {budget.max_bytes} bytes (at "
                f"{member.name[:200]!r}); nothing was extracted",
                "path",
            ) from None
        if parts:
            found.append((member, parts))
    return found


def _tops(members: list[tuple[tarfile.TarInfo, list[str]]]) -> list[str]:
    """The names the members add at the top (each once, in archive order)."""
    return list(dict.fromkeys(parts[0] for _, parts in members))


def _taken(name: str) -> Refused:
    return Refused(
        "exists",
        f"already holds {name[:200]!r}, which the archive would add "
        "(nothing is replaced or merged); nothing was extracted",
        "target_path",
    )


class Into:
    """An existing folder that `target_path` names (links inside followed), extracted into:
    the members land in it beside what is there, never replacing or merging into any of it.
    They are unpacked into a fresh hidden folder inside it first (`writer.work_name`) and
    moved in, each top-level name by `writer.move_new`, only when all is unpacked; a name
    taken meanwhile undoes the moves already made."""

    name = "iri"

    def __init__(self, area: Area, fd: int, parts: list[str]) -> None:
        self.area, self.fd, self.parts = area, fd, parts

    @classmethod
    def open(cls, spec: dict[str, Any]) -> Into | None:
        """The folder `spec` names, when it is an existing folder; None otherwise (missing,
        not a folder, or not reachable: `Place` then says which)."""
        try:
            area = Area(str(spec["base"]), list(spec["top"]), list(spec["reserved"]))
        except Refused:
            return None
        try:
            fd, name, parts = area.resolve([str(part) for part in spec["rest"]], True)
        except Refused:
            area.close()
            return None
        if name is not None:
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                inner = (
                    area._open_folder(fd, name, len(parts) - 1)
                    if stat.S_ISDIR(info.st_mode)
                    else None
                )
            except (Refused, reader.LinkMet, OSError):
                inner = None
            finally:
                os.close(fd)
            if inner is None:
                area.close()
                return None
            fd = inner
        return cls(area, fd, parts)

    def close(self) -> None:
        os.close(self.fd)
        self.area.close()

    def __enter__(self) -> Into:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def entry(self) -> dict[str, Any]:
        path = "/" + "/".join(self.area.base_parts + self.parts)
        return reader.entry_of(path, os.fstat(self.fd), None, reader.Names())

    def free(self, members: list[tuple[tarfile.TarInfo, list[str]]]) -> None:
        """Refused (`exists`, naming it) when the folder already has a top-level name the
        archive adds; checked before anything is written."""
        for name in _tops(members):
            try:
                os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as error:
                raise writer.os_refusal(error, "target_path") from None
            raise _taken(name)

    def move_in(self, fresh: str, members: list[tuple[tarfile.TarInfo, list[str]]]) -> None:
        """Move what `fresh` holds into the folder, never replacing; a name taken since
        `free` moves back what was moved (the folder is left as it was) and is refused."""
        source = os.open(fresh, writer.DIRECTORY, dir_fd=self.fd)
        moved: list[str] = []
        try:
            for name in _tops(members):
                try:
                    writer.move_new(source, name, self.fd, name)
                except FileExistsError:
                    for done in reversed(moved):
                        with contextlib.suppress(OSError):
                            writer.move_new(self.fd, done, source, done)
                    raise _taken(name) from None
                moved.append(name)
        finally:
            os.close(source)
        os.rmdir(fresh, dir_fd=self.fd)


def _scan_headers(stream: IO[bytes], mode: str, budget: writer.Budget, compression: str) -> None:
    """Every header of the archive bounded before `tarfile` parses one (`tarheaders`: it is
    quadratic or unbounded on some), the stream then rewound."""
    try:
        tarheaders.scan(
            tarheaders.decompressed(stream, mode),
            max_members=budget.max_files,
            max_bytes=budget.max_bytes,
        )
    except tarheaders.HeaderRefused as refused:
        raise Refused(
            "bad_member" if refused.kind == "bad_header" else "too_large", refused.message, "path"
        ) from None
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as error:
        raise Refused(
            "not_archive", f"is not a tar archive with {compression} compression ({error})", "path"
        ) from None
    stream.seek(0)


def do_extract(request: dict[str, Any]) -> dict[str, Any]:
    mode = _mode(request)
    spec = request["path"]
    area = Area(str(spec["base"]), list(spec["top"]), list(spec["reserved"]))
    try:
        archive, _ = area.open_file(list(spec["rest"]))
    finally:
        area.close()
    into = Into.open(request["target"])
    with (
        os.fdopen(archive, "rb") as stream,
        into if into is not None else Place(request["target"], "target_path") as target,
    ):
        budget = writer.Budget(int(request["max_files"]), int(request["max_bytes"]))
        _scan_headers(stream, mode, budget, str(request.get("compression", "gzip")))
        try:
            tar = _open_tar(stream, f"r:{mode}" if mode else "r:")
            members = _members(tar, budget)
        except (tarfile.TarError, EOFError, OSError) as error:
            raise Refused(
                "not_archive",
                f"is not a tar archive with "
                f"{request.get('compression', 'gzip')} compression ({error})",
                "path",
            ) from None
        if isinstance(target, Into):
            target.free(members)
        else:
            writer.must_be_absent(target)
        fresh = writer.work_name()
        writer.remove_stale_work(target.fd, target.area)
        try:
            os.mkdir(fresh, 0o700, dir_fd=target.fd)
            root = os.open(fresh, writer.DIRECTORY, dir_fd=target.fd)
        except OSError as error:
            raise writer.os_refusal(error, "target_path") from None
        try:
            try:
                unpacker = _Unpacker(
                    tar,
                    root,
                    writer.Budget(budget.max_files, budget.max_bytes),
                    writer.reporter(request),
                )
                unpacker.counts["entries_total"] = len(members)
                unpacker.counts["bytes_total"] = budget.max_bytes - budget.bytes
                for member, parts in members:
                    unpacker.member(member, parts)
                    unpacker.counts["entries_done"] += 1
                    unpacker.report(unpacker.counts)
                unpacker.finish()
                os.fchmod(root, 0o755)
            finally:
                os.close(root)
            if isinstance(target, Into):
                target.move_in(fresh, members)
            else:
                writer.move_new(target.fd, fresh, target.fd, target.name)
        except BaseException as error:
            writer.discard(target.fd, fresh, target.area)
            if isinstance(error, (tarfile.TarError, EOFError)):
                raise Refused("not_archive", f"is damaged ({error})", "path") from None
            if isinstance(error, OSError):
                raise writer.os_refusal(error, "target_path") from None
            raise
        return {"output": target.entry()}


# ---- requests ------------------------------------------------------------------------------

OPERATIONS = {**writer.OPERATIONS, "compress": do_compress, "extract": do_extract}


def serve(request: dict[str, Any]) -> dict[str, Any]:
    """The writer's `serve`, with `compress` and `extract` too."""
    return writer.serve(request, OPERATIONS)


READS = ("stat", "ls", "head", "tail", "view", "range")
"""The reader's operations, which the agent answers too."""


def serve_any(request: dict[str, Any]) -> dict[str, Any]:
    """Any request of the file agent's: the reader's, the writer's, or these two."""
    if request.get("op") in READS:
        return reader.serve(request)
    return serve(request)


def main() -> None:
    """The file agent: `supervisor.main`, each request answered by `serve_any` in a worker
    with limits (progress lines before the answer when asked with `progress`)."""
    supervisor.main(serve_any)


if __name__ == "__main__":
    main()
