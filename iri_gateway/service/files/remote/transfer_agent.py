"""The no-follow transfer agent: write an uploaded file, or open a file to download, confined
exactly as the reader reads (`reader.Area`), in-process or on the login node.

Self-contained like `reader` (standard library and `reader` only). The gateway never runs it
in-process: it packs it with `reader` (`shipping.TRANSFER_AGENT`) and runs that program with
`-I -c`, on this machine with its own interpreter as its own account, over SSH on the login
node with `python3` as the user's mapped account, so that the operating system decides too.

Why not SFTP: an SFTP server resolves every path it is given by name, following links in
every component, and offers no open relative to a folder descriptor nor `O_NOFOLLOW`; a job
swapping a folder for a link between the gateway's check and the SFTP open would redirect
the write. Running this agent gives the same discipline as reads: every component opened
without following links out, the file created in the folder so opened.

An upload never replaces anything and never follows a link at its target: the file is
created under a temporary name (`O_CREAT | O_EXCL | O_NOFOLLOW`) in the opened target folder,
written, and only when complete linked to its name with `linkat`, which fails when anything
(a file, a folder, a link, even a dangling one) has that name; the temporary name is then
removed. A half upload (the client went away, the size limit was passed, the disk is full)
removes its temporary file and leaves nothing behind. The official spec says nothing of
overwriting, so an existing target is refused (`exists`).

A writer killed outright (kill -9, a crash) cannot remove its temporary file, so the name
says who writes it: `.iri-upload-<host>-<pid>-<random>`, `<host>` standing for this boot of
this machine and its process-id namespace (a digest of the kernel's boot id and the pid
namespace), `<pid>` for the writing process. Each upload first removes, in the folder it
writes to, the regular files so named whose `<host>` is its own and whose process is gone;
never one of another machine (a shared filesystem) or boot, nor one whose process lives
(concurrent uploads, even of one process, keep theirs).

Remote protocol (stdin and stdout are bytes). First line in: the request as JSON
(`op`: `upload` or `download`, and `base`, `top`, `rest`, `reserved` as for the reader).
- upload: one JSON line out (`{"ok": true}` when the temporary file is made, or the
  refusal); then frames in, each `<length>\\n` and that many bytes, ended by `0\\n`; then
  one JSON line out (`{"ok": true, "result": {"size": N}}` or the refusal). End of input
  before `0\\n` means the gateway gave up: the temporary file is removed, nothing is written.
- download: one JSON line out (`{"ok": true, "size": N}` or the refusal), then exactly N
  bytes (the size when opened).
Refusal kinds, beyond the reader's: `exists` (the target's name is taken), `denied` (the
operating system refuses to create the file), `write_failed` (e.g. the disk is full).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
from typing import Any, BinaryIO

from iri_gateway.service.files.remote import reader

CHUNK = 256 * 1024
"""Bytes per read or frame."""
TEMP_PREFIX = ".iri-upload-"
"""Start of an upload's temporary name (hidden, beside the target)."""
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)


def _area(request: dict[str, Any]) -> reader.Area:
    return reader.Area(str(request["base"]), list(request["top"]), list(request["reserved"]))


class Upload:
    """A file being written under a temporary name beside its target (see the docstring)."""

    def __init__(self, request: dict[str, Any]) -> None:
        rest = list(request["rest"])
        if not rest:
            raise reader.Refused("directory")  # the job folder or granted root itself
        area = _area(request)
        try:
            name = reader.checked_name(rest[-1])
            folder, _, _ = area.open_folder(rest[:-1])
        finally:
            area.close()
        if folder is None:
            raise reader.Refused("not_found")  # what should hold the file is not a folder
        self.folder, self.name, self.size, self.fd = folder, name, 0, -1
        self.temp = reader.temporary_name(TEMP_PREFIX)
        try:
            remove_stale(folder)
            if _taken(folder, name):
                raise reader.Refused("exists")
            try:
                self.fd = os.open(self.temp, _CREATE, 0o666, dir_fd=folder)
            except OSError as error:
                kind = "denied" if error.errno in _DENIED else "write_failed"
                raise reader.Refused(kind, error.strerror or "") from None
        except BaseException:
            self.abort()
            raise

    def write(self, data: bytes) -> None:
        """Append `data`; Refused (`write_failed`) and nothing left behind on failure."""
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError as error:
            self.abort()
            raise reader.Refused("write_failed", error.strerror or "") from None
        self.size += len(data)

    def commit(self) -> int:
        """Give the file its name (never replacing anything); its size."""
        try:
            os.close(self.fd)
            self.fd = -1
            try:
                os.link(
                    self.temp,
                    self.name,
                    src_dir_fd=self.folder,
                    dst_dir_fd=self.folder,
                    follow_symlinks=False,
                )
            except FileExistsError:
                raise reader.Refused("exists") from None
            except OSError as error:
                raise reader.Refused("write_failed", error.strerror or "") from None
            return self.size
        finally:
            self.abort()

    def abort(self) -> None:
        """Remove the temporary file and let go of the folder (harmless when done)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.folder >= 0:
            with contextlib.suppress(OSError):
                os.unlink(self.temp, dir_fd=self.folder)
            os.close(self.folder)
            self.folder = -1


def remove_stale(folder: int) -> None:
    """Remove the temporary files in the open `folder` that a writer of this host left when
    it was killed (its process is gone); see the module docstring."""
    for name in reader.stale_names(folder, TEMP_PREFIX):
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=folder)


def _taken(folder: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def open_download(request: dict[str, Any]) -> tuple[int, int]:
    """An open regular file (links inside followed, as reads do) and its size."""
    area = _area(request)
    try:
        fd, info = area.open_file(list(request["rest"]))
    finally:
        area.close()
    return fd, info.st_size


# ---- the remote side -----------------------------------------------------------------------


def _answer(out: BinaryIO, answer: dict[str, Any]) -> None:
    out.write(json.dumps(answer).encode() + b"\n")
    out.flush()


def _refusal(refused: reader.Refused) -> dict[str, Any]:
    return {"ok": False, "error": refused.kind, "detail": refused.detail, "field": refused.field}


def _receive(upload: Upload, source: BinaryIO) -> bool:
    """Frames into `upload` until the end mark (True) or the end of input (False)."""
    while True:
        line = source.readline(32)
        if not line.endswith(b"\n"):
            return False
        length = int(line)
        if length == 0:
            return True
        data = source.read(length)
        if len(data) != length:
            return False
        upload.write(data)


def _serve_upload(request: dict[str, Any], source: BinaryIO, out: BinaryIO) -> int:
    upload = Upload(request)
    try:
        _answer(out, {"ok": True})
        if not _receive(upload, source):
            upload.abort()
            return 3
        size = upload.commit()
    finally:
        upload.abort()
    _answer(out, {"ok": True, "result": {"size": size}})
    return 0


def _serve_download(request: dict[str, Any], out: BinaryIO) -> int:
    fd, size = open_download(request)
    try:
        _answer(out, {"ok": True, "size": size})
        left = size
        while left > 0:
            data = os.read(fd, min(CHUNK, left))
            if not data:
                return 4  # the file shrank: the gateway sees the short stream
            out.write(data)
            left -= len(data)
        out.flush()
    finally:
        os.close(fd)
    return 0


def main() -> int:
    """One request line on stdin, then the protocol of its operation (module docstring)."""
    source, out = sys.stdin.buffer, sys.stdout.buffer
    request = json.loads(source.readline())
    try:
        if request["op"] == "upload":
            return _serve_upload(request, source, out)
        if request["op"] == "download":
            return _serve_download(request, out)
        raise ValueError(f"unknown operation {request['op']!r}")
    except reader.Refused as refused:
        _answer(out, _refusal(refused))
        return 0


if __name__ == "__main__":
    sys.exit(main())
