"""The request bodies of the IRI filesystem operations that change files (`mkdir`, `rm`, `mv`,
`cp`, `chmod`, `chown`, `symlink`, `compress`, `extract`) and of `file` and `checksum`, as the
official schemas have them, with the bounds the gateway enforces stated in the schema.

Strict like the official JSON Schema ("yes" is not a boolean), and taking every request the
official schema allows: where it lets `path` be null or absent, or `mode` be any string, so
does this one, and the operation (after finding the resource) answers 422 naming the field.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from iri_gateway.service.files.policy import PATH_MAX

_STRICT = ConfigDict(strict=True)
NAME_MAX = 255
"""Longest user or group name `chown` accepts."""


class PostMakeDirRequest(BaseModel):
    """Represents a request to create a directory."""

    model_config = _STRICT

    path: str | None = Field(
        default=None,
        max_length=PATH_MAX,
        description="The directory to create",
        examples=["/home/user/dir"],
    )
    parent: bool = Field(
        default=False,
        description="If set to `true` creates all its parent "
        "directories if they do not already exist",
    )


class PostRmRequest(BaseModel):
    """Request body for the rm endpoint."""

    model_config = _STRICT

    path: str = Field(
        max_length=PATH_MAX, description="The path to delete", examples=["/home/user/old-file.txt"]
    )
    recursive: bool = Field(
        default=False,
        description="Extension (not in the official "
        "schema): remove a directory and everything in it; a directory "
        "is refused without it. Links inside are removed, never followed",
    )


class _SourceTarget(BaseModel):
    """The pair every operation from one place to a new one takes (`mv`, `cp`, `compress`,
    `extract`): a source `path` (null allowed, as the official schema does: then a 422 naming
    it) and the new `target_path`."""

    model_config = _STRICT

    path: str | None = Field(
        default=None,
        max_length=PATH_MAX,
        description="Source file or directory path",
        examples=["/home/user/dir"],
    )
    target_path: str = Field(
        max_length=PATH_MAX,
        description="Target path of the "
        "operation: the new name (an existing one is never replaced)",
        examples=["/home/user/dir/file.new"],
    )


class PostMoveRequest(_SourceTarget):
    """Represents a request to move a file."""


class PostCopyRequest(_SourceTarget):
    """Represents a request to copy a file."""

    dereference: bool = Field(
        default=False,
        description="If set to `true`, a `path` that is "
        "a symbolic link is followed and what it points to is copied",
    )


class PutFileChmodRequest(BaseModel):
    """Represents a request to change file permissions."""

    model_config = _STRICT

    path: str | None = Field(
        default=None,
        max_length=PATH_MAX,
        description="File or directory path",
        examples=["/home/user/dir"],
    )
    mode: str = Field(
        max_length=NAME_MAX,
        description="Mode in octal permission format: 1 to "
        "4 octal digits (anything else is a 422 naming `mode`)",
        examples=["755"],
    )


class PutFileChownRequest(BaseModel):
    """Represents a request to change file ownership."""

    model_config = _STRICT

    path: str | None = Field(
        default=None,
        max_length=PATH_MAX,
        description="File or directory path",
        examples=["/home/user/dir"],
    )
    owner: str = Field(
        default="",
        max_length=NAME_MAX,
        description="User name of the new user owner of the file (empty: unchanged)",
        examples=["user"],
    )
    group: str = Field(
        default="",
        max_length=NAME_MAX,
        description="Group name of the new group owner of the file (empty: unchanged)",
        examples=["my-group"],
    )


class PostFileSymlinkRequest(BaseModel):
    """Represents a request to create a symbolic link."""

    model_config = _STRICT

    path: str | None = Field(
        default=None,
        max_length=PATH_MAX,
        description="What the link points to (relative: from the link's "
        "folder); it must lie inside the folders you may use",
        examples=["/home/user/dir"],
    )
    link_path: str = Field(
        max_length=PATH_MAX, description="Path to the new symlink", examples=["/home/user/newlink"]
    )


class PostFileRequest(BaseModel):
    """Request body for the file-type endpoint."""

    model_config = _STRICT

    path: str = Field(
        max_length=PATH_MAX, description="A file or folder path", examples=["/home/user/file.txt"]
    )


class PostChecksumRequest(BaseModel):
    """Request body for the checksum endpoint."""

    model_config = _STRICT

    path: str = Field(
        max_length=PATH_MAX,
        description="Path to the file to checksum",
        examples=["/home/user/file.txt"],
    )


COMPRESSION_URN = (
    "^urn:doe-iri:compression:(?:[A-Za-z0-9._~-]|%[0-9A-Fa-f]{2}|[!$&'()*+,;=@]|/)+"
    "(?::(?:[A-Za-z0-9._~-]|%[0-9A-Fa-f]{2}|[!$&'()*+,;=@]|/)+)*$"
)
"""The official pattern of a compression URN (`urn:doe-iri:compression:<type>`)."""


def _compression() -> Any:
    return Field(
        default="urn:doe-iri:compression:gzip",
        min_length=25,
        pattern=COMPRESSION_URN,
        description="DOE IRI URN for the compression type "
        "(urn:doe-iri:compression:<type>): `none`, `gzip`, `bzip2` or `xz` (any "
        "other type is a 422 naming `compression`)",
        examples=["urn:doe-iri:compression:gzip", "urn:doe-iri:compression:none"],
    )


class PostCompressRequest(_SourceTarget):
    """Represents a request to compress a file."""

    target_path: str = Field(
        max_length=PATH_MAX,
        description="Path to the compressed file "
        "(a tar archive; an existing one is never replaced)",
        examples=["/home/user/file.tar.gz"],
    )
    match_pattern: str | None = Field(
        default=None,
        max_length=PATH_MAX,
        description="Regex pattern to filter files to compress "
        "(Python syntax, searched in each file's path relative "
        "to `path`; folders are always stored)",
        examples=[r".*\.txt$"],
    )
    dereference: bool = Field(
        default=False,
        description="Must be `false` (or absent): "
        "symbolic links are stored as links, never followed; `true` "
        "is a 400 naming `dereference`",
    )
    compression: str = _compression()


class PostExtractRequest(_SourceTarget):
    """Represents a request to extract a compressed file."""

    path: str | None = Field(
        default=None,
        max_length=PATH_MAX,
        description="The tar archive to extract",
        examples=["/home/user/dir/file.tar.gz"],
    )
    target_path: str = Field(
        max_length=PATH_MAX,
        description="Path to the directory where "
        "to extract the compressed file: a new folder (an existing one "
        "is a 409), made only when the whole archive is extracted",
        examples=["/home/user/dir"],
    )
    compression: str = _compression()
