"""The request and result bodies of the IRI filesystem operations, as the official schemas
have them.

Request bodies are strict, like the official JSON Schema: "1" is not a byte count and "yes"
not a boolean. Results travel inside a completed task (`Task.result["output"]`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from iri_gateway.models.jobspec import JsonInt, PositiveInt
from iri_gateway.service.files.policy import PATH_MAX

DEFAULT_DIRECTORY = (
    " An empty path is your default directory: the resource's job root, "
    "where the folders of your jobs are (`ls` lists only those)."
)

# ---- official request bodies ---------------------------------------------------------------


class PostLsRequest(BaseModel):
    """Request body for the ls endpoint."""

    model_config = ConfigDict(strict=True)

    path: str = Field(
        max_length=PATH_MAX,
        description="The path to list." + DEFAULT_DIRECTORY,
        examples=["/home/user"],
    )
    show_hidden: bool = Field(default=False, alias="showHidden", description="Show hidden files")
    numeric_uid: bool = Field(
        default=False, alias="numericUid", description="List numeric user and group IDs"
    )
    recursive: bool = Field(default=False, description="Recursively list files and folders")
    dereference: bool = Field(
        default=False, description="Show information for the file the link references"
    )


class PostHeadRequest(BaseModel):
    """Request body for the head endpoint."""

    model_config = ConfigDict(populate_by_name=True, strict=True)

    path: str = Field(
        max_length=PATH_MAX,
        description="File path." + DEFAULT_DIRECTORY,
        examples=["/home/user/file.txt"],
    )
    bytes_: JsonInt | None = Field(
        default=None, alias="bytes", description="Return the first NUM bytes of the file"
    )
    lines: JsonInt | None = Field(
        default=None, description="Return the first NUM lines of the file"
    )
    skip_trailing: bool = Field(
        default=False,
        alias="skipTrailing",
        description="Return the whole file without the last NUM bytes/lines",
    )


class PostTailRequest(BaseModel):
    """Request body for the tail endpoint."""

    model_config = ConfigDict(populate_by_name=True, strict=True)

    path: str = Field(
        min_length=1, max_length=PATH_MAX, description="File path", examples=["/home/user/file.txt"]
    )
    bytes_: PositiveInt | None = Field(
        default=None, alias="bytes", description="Return the last NUM bytes of the file"
    )
    lines: PositiveInt | None = Field(
        default=None, description="Return the last NUM lines of the file"
    )
    skip_heading: bool = Field(
        default=False,
        alias="skipHeading",
        description="Return the whole file without the first NUM bytes/lines",
    )


class PostViewRequest(BaseModel):
    """Request body for the view endpoint."""

    model_config = ConfigDict(strict=True)

    path: str = Field(
        max_length=PATH_MAX,
        description="File path." + DEFAULT_DIRECTORY,
        examples=["/home/user/file.txt"],
    )
    # As in the official schema: minimum 1, default 0 (0, the default, means "up to the limit").
    size: JsonInt = Field(default=0, ge=1, description="Number of bytes to retrieve from the file")
    offset: JsonInt = Field(default=0, ge=0, description="Byte offset to start reading from")


class PostStatRequest(BaseModel):
    """Request body for the stat endpoint."""

    model_config = ConfigDict(strict=True)

    path: str = Field(
        max_length=PATH_MAX,
        description="A file or folder path." + DEFAULT_DIRECTORY,
        examples=["/home/user/file.txt"],
    )
    dereference: bool = Field(default=False, description="Follow symbolic links")


# ---- result shapes (inside Task.result["output"]) ------------------------------------------


class FileContent(BaseModel):
    """Part of a file; positions are byte offsets (end exclusive)."""

    content: str
    content_type: str = Field(description="'bytes' or 'lines': how the part was chosen")
    start_position: int
    end_position: int
    file_size: int = Field(description="Size of the file when it was read")
    truncated: bool = Field(description="True when the limit cut the answer short")


class File(BaseModel):
    """One entry of a listing."""

    name: str
    type: str = Field(description="'file', 'directory', 'symlink' or 'other'")
    link_target: str | None = None
    user: str
    group: str
    permissions: str
    last_modified: str
    size: str


class FileStat(BaseModel):
    """The `stat` of a file."""

    mode: int
    ino: int
    dev: int
    nlink: int
    uid: int
    gid: int
    size: int
    atime: int
    ctime: int
    mtime: int
