"""Tar headers bounded before Python's `tarfile` parses them: a small scanner of the raw
512-byte blocks (after decompression, as a stream) that refuses, naming the member and its
offset, what `tarfile` would take too long or too much memory to read.

Why a scanner of our own: `tarfile` reads a PAX extended header (`x`, `g`) or a GNU long name
(`L`, `K`) whole into memory whatever its declared size, and its PAX record parser is
quadratic on long number fields (CVE-2024-6232: a 40,000-digit length or value stalls it for
seconds, a 1 MiB one for about an hour; fixed only in some patch releases, and a deployment
must not depend on the interpreter's patch level). `tarfile` offers no hook to look at a
header before it is parsed, so the archive is read once through this scanner first, and
handed to `tarfile` only when every header is within the bounds below; `tarfile` then parses
headers that are small and well formed, which it does in linear time.

Bounds (each refusal says which):
- an extended header (`x`, `g`, `L`, `K`) carries at most MAX_EXTENDED bytes, and at most
  MAX_CHAINED of them precede one member;
- a PAX record is `<length> <keyword>=<value>\\n` exactly, its length field at most
  MAX_DIGITS digits; the numeric values (`size`, `mtime`, `uid`, `gid`, ...) at most
  MAX_DIGITS digits (a fraction too); `path` and `linkpath` at most PATH_MAX bytes; GNU sparse
  keywords and a global `size` are refused (not offered);
- a member's name and link (long name, PAX path, or ustar prefix and name) at most PATH_MAX
  bytes;
- the ustar number fields (mode, uid, gid, size, mtime, checksum, device numbers) are octal
  digits (ended by NUL or space) or base-256 (first byte 0x80 or 0xff), the checksum right;
- members (`max_members`) and the bytes they declare (`max_bytes`) within the request's
  limits, so that what is decompressed stays bounded: the scanner reads headers and skips the
  declared data, never more than `max_bytes` of it.

Standard library only, Python 3.9 or later: it runs on the login node too, installed with the
reader, the writer and the archiver (see `writes.program`).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from typing import IO, Any, Protocol

BLOCK = 512
MAX_EXTENDED = 64 * 1024
"""Most bytes of one PAX extended header or GNU long name or link."""
MAX_CHAINED = 8
"""Most extended headers before one member."""
MAX_DIGITS = 30
"""Most digits of a PAX record's length or of a number in it (2**64 has 20)."""
PATH_MAX = 4096
"""Longest member name or link, in bytes (Linux PATH_MAX)."""
SKIP_CHUNK = 1024 * 1024

NUMERIC_KEYWORDS = frozenset(
    {
        b"size",
        b"mtime",
        b"atime",
        b"ctime",
        b"uid",
        b"gid",
        b"SCHILY.devmajor",
        b"SCHILY.devminor",
        b"SCHILY.ino",
        b"SCHILY.nlink",
        b"SCHILY.dev",
    }
)
PATH_KEYWORDS = frozenset({b"path", b"linkpath"})
_NO_DATA = frozenset(b"123456")
"""Type flags whose members carry no data (links, devices, folders, fifos): `tarfile` skips
nothing after them, whatever their size field says."""
_EXTENDED = frozenset(b"xgLK")
_NUMBER_FIELDS = (
    ("mode", 100, 108),
    ("uid", 108, 116),
    ("gid", 116, 124),
    ("size", 124, 136),
    ("mtime", 136, 148),
    ("checksum", 148, 156),
    ("devmajor", 329, 337),
    ("devminor", 337, 345),
)


class Readable(Protocol):
    """What the scanner reads: a stream of bytes (a file, or a decompressor over one)."""

    def read(self, size: int = -1, /) -> bytes: ...


class HeaderRefused(Exception):
    """The archive is refused: `kind` is `bad_header` (a header beyond the bounds or
    malformed) or `too_large` (beyond the request's limits); the message says which member,
    where, and which bound."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


def decompressed(stream: IO[bytes], compression: str) -> Readable:
    """`stream` read through the decompressor `compression` names (`tarfile`'s words: '',
    'gz', 'bz2', 'xz'), as a stream."""
    if compression == "gz":
        return gzip.GzipFile(fileobj=stream, mode="rb")
    if compression == "bz2":
        return bz2.BZ2File(stream)
    if compression == "xz":
        return lzma.LZMAFile(stream)
    return stream


def _shown(name: bytes) -> str:
    return repr(name[:200].decode("utf-8", "replace"))


class _Scan:
    """The state of one scan: where it is, what the next member's extended headers said."""

    def __init__(self, stream: Readable, max_members: int, max_bytes: int) -> None:
        self.stream, self.max_members, self.max_bytes = stream, max_members, max_bytes
        self.offset = 0
        self.members = 0
        self.declared = 0
        self.chained = 0
        self.name = b""
        self.header_name = b""
        self.size: int | None = None

    def bad(self, where: int, reason: str) -> HeaderRefused:
        if self.name:
            member = f"member {_shown(self.name)}"
        else:  # the member's name comes after: the extended header's own is shown
            member = f"the header {_shown(self.header_name)}" if self.header_name else "a member"
        return HeaderRefused(
            "bad_header",
            f"{member} (header at byte {where} of the "
            f"unpacked archive) {reason}; nothing was extracted",
        )

    def read(self, size: int) -> bytes:
        data = self.stream.read(size)
        self.offset += len(data)
        return data

    def skip(self, size: int) -> bool:
        """Read past `size` bytes of data (rounded up to whole blocks); False at the end."""
        left = -(-size // BLOCK) * BLOCK
        while left > 0:
            chunk = self.read(min(left, SKIP_CHUNK))
            if not chunk:
                return False
            left -= len(chunk)
        return True

    def run(self) -> None:
        while True:
            where = self.offset
            block = self.read(BLOCK)
            if len(block) < BLOCK or block == bytes(BLOCK):
                return  # the end (or a truncated archive, which tarfile then reports)
            self.header(where, block)

    def header(self, where: int, block: bytes) -> None:
        self.header_name = _ustar_name(block)  # an extended header's own names its member
        numbers = {
            name: self.number(where, name, block[start:end]) for name, start, end in _NUMBER_FIELDS
        }
        if not _checksum_right(block, numbers["checksum"]):
            raise self.bad(where, "has a wrong checksum (the archive is damaged)")
        kind = block[156]
        size = numbers["size"]
        if kind in _EXTENDED:
            self.extended(where, kind, size)
            return
        if kind == ord("S"):
            raise self.bad(where, "is a GNU sparse file, which extract does not offer")
        if not self.name:
            self.name = _ustar_name(block)
        self.members += 1
        if self.members > self.max_members:
            raise HeaderRefused(
                "too_large",
                f"has more than {self.max_members} members (at "
                f"{_shown(self.name)}, byte {where}); nothing was extracted",
            )
        if self.size is not None:
            size = self.size
        if size < 0:
            raise self.bad(where, "has a negative size")
        has_data = kind not in _NO_DATA
        if has_data:
            self.declared += size
            if self.declared > self.max_bytes:
                raise HeaderRefused(
                    "too_large",
                    f"declares more than {self.max_bytes} bytes "
                    f"(at {_shown(self.name)}, byte {where}); nothing was "
                    "extracted",
                )
        self.name, self.size, self.chained = b"", None, 0
        if has_data:
            self.skip(size)

    def number(self, where: int, field: str, raw: bytes) -> int:
        """A ustar number field as `tarfile` reads it (octal text up to the first NUL, spaces
        around it; or base-256), refused when it is neither."""
        if raw[0] in (0x80, 0xFF):
            value = int.from_bytes(raw[1:], "big")
            return value - (1 << (8 * len(raw) - 8)) if raw[0] == 0xFF else value
        text = raw.split(b"\0", 1)[0].strip(b" ")
        if text and not all(0x30 <= c <= 0x37 for c in text):
            raise self.bad(where, f"has a {field} field that is neither octal digits nor base-256")
        return int(text or b"0", 8)

    def extended(self, where: int, kind: int, size: int) -> None:
        self.chained += 1
        letter = chr(kind)
        if self.chained > MAX_CHAINED:
            raise self.bad(where, f"has more than {MAX_CHAINED} extended headers in a row")
        if size < 0 or size > MAX_EXTENDED:
            raise self.bad(
                where,
                f"has a {letter!r} extended header of {size} bytes; at most "
                f"{MAX_EXTENDED} are read",
            )
        payload = self.read(size)
        padding = -size % BLOCK
        if len(payload) < size or len(self.read(padding)) < padding:
            return  # truncated: tarfile reports it
        if letter in "LK":
            text = payload.split(b"\0", 1)[0]
            if len(text) > PATH_MAX:
                raise self.bad(
                    where,
                    f"has a GNU long {'name' if letter == 'L' else 'link'} "
                    f"of {len(text)} bytes; at most {PATH_MAX} (PATH_MAX)",
                )
            if letter == "L":
                self.name = text
            return
        for keyword, value in _records(payload, lambda reason: self.bad(where, reason)):
            if keyword.startswith(b"GNU.sparse"):
                raise self.bad(where, "is a GNU sparse file, which extract does not offer")
            if keyword in NUMERIC_KEYWORDS:
                if not _decimal(value):
                    raise self.bad(
                        where,
                        f"has a PAX {keyword.decode()} of {len(value)} "
                        f"characters; a number has at most {MAX_DIGITS} digits",
                    )
                if keyword == b"size":
                    if letter == "g":
                        raise self.bad(
                            where,
                            "sets a size for every member (a global PAX "
                            "size), which extract does not offer",
                        )
                    if value.startswith(b"-") or b"." in value:
                        raise self.bad(where, "has a PAX size that is not a whole number")
                    self.size = int(value)
            elif keyword in PATH_KEYWORDS:
                if len(value) > PATH_MAX:
                    raise self.bad(
                        where,
                        f"has a PAX {keyword.decode()} of {len(value)} "
                        f"bytes; at most {PATH_MAX} (PATH_MAX)",
                    )
                if keyword == b"path" and letter == "x":
                    self.name = value


def _records(payload: bytes, bad: Any) -> list[tuple[bytes, bytes]]:
    """The (keyword, value) records of a PAX header, each `<length> <keyword>=<value>\\n`
    exactly; `bad(reason)` is raised for anything else."""
    found, position = [], 0
    while position < len(payload):
        if payload[position] == 0 and not payload[position:].strip(b"\0"):
            break  # padding (looked at only where a NUL stands: no copy per record)
        space = payload.find(b" ", position, position + MAX_DIGITS + 1)
        digits = payload[position:space] if space >= 0 else b""
        if not digits or not digits.isdigit():
            raise bad(
                f"has a PAX record at byte {position} of its header without a length "
                f"of at most {MAX_DIGITS} digits"
            )
        length = int(digits)
        end = position + length
        record = payload[position:end]
        if end > len(payload) or length <= len(digits) + 2 or not record.endswith(b"\n"):
            raise bad(
                f"has a PAX record at byte {position} of its header whose length "
                f"({length}) does not match it"
            )
        equals = record.find(b"=", len(digits) + 1)
        if equals <= len(digits) + 1:
            raise bad(f"has a PAX record at byte {position} of its header without a keyword")
        found.append((record[len(digits) + 1 : equals], record[equals + 1 : -1]))
        position = end
    return found


def _decimal(value: bytes) -> bool:
    """True when `value` is a decimal number of at most MAX_DIGITS digits on each side of
    an optional point (an optional leading minus)."""
    whole, _, fraction = value.removeprefix(b"-").partition(b".")
    return (
        0 < len(whole) <= MAX_DIGITS
        and whole.isdigit()
        and len(fraction) <= MAX_DIGITS
        and (not fraction or fraction.isdigit())
    )


def _checksum_right(block: bytes, expected: int) -> bool:
    """The header's checksum as `tarfile` checks it (unsigned or signed bytes, the checksum
    field counted as spaces)."""
    counted = block[:148] + b" " * 8 + block[156:]
    unsigned = sum(counted)
    signed = sum(byte - 256 if byte > 127 else byte for byte in counted)
    return expected in (unsigned, signed)


def _ustar_name(block: bytes) -> bytes:
    name = block[:100].split(b"\0", 1)[0]
    if block[257:262] == b"ustar":
        prefix = block[345:500].split(b"\0", 1)[0]
        if prefix:
            return prefix + b"/" + name
    return name


def scan(stream: Readable, *, max_members: int, max_bytes: int) -> None:
    """Read the (decompressed) tar `stream` to its end mark, refusing (`HeaderRefused`) the
    first header beyond the bounds of the module docstring; reads at most the headers and
    `max_bytes` of declared data."""
    _Scan(stream, max_members, max_bytes).run()
