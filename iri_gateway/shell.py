"""Quoting for the three grammars a batch script mixes: bash, #SBATCH lines and #PBS lines.

Two kinds of words reach a script. *User words* (anything from a JobSpec) are always
single-quoted for bash, so nothing in them is ever interpreted. *Site words* (written by the
facility admin in a profile) are double-quoted, so `$VAR` in them expands on the compute node
as the admin intends, while spaces and globs stay literal. `SiteWord` marks the latter; every
other string is a user word.

Directive lines are comments to bash but are parsed by the scheduler: Slurm's parser groups
with quotes and honours backslash escapes (sbatch `_get_argument`), and a newline ends the
line, so values containing control characters must be refused before they get here.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SAFE_WORD = re.compile(r"[\w@%+=:,./-]+", re.ASCII).fullmatch
_BARE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+\Z")
_PLAIN_DIRECTIVE = re.compile(r"^[A-Za-z0-9_@%+=:,./\-\[\]]*\Z")


class SiteWord(str):
    """A shell word from the facility profile: trusted, `$VAR` expands at run time."""

    __slots__ = ()


def quote(word: str) -> str:
    """Quote one word for bash: site words in double quotes, user words in single quotes."""
    if type(word) is SiteWord:
        return quote_site(word)
    if word and _SAFE_WORD(word):  # the common case, without shlex's extra calls
        return word
    return shlex.quote(word)


def quote_site(word: str) -> str:
    """Double-quote a site word: `$` expands; backslash, quote and backtick are escaped.

    Words made only of characters no shell treats specially are written bare, for legibility.
    """
    if _BARE.match(word):
        return word
    escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")
    return f'"{escaped}"'


def join(words: Iterable[str]) -> str:
    """A command line: each word quoted by its kind, separated by single spaces."""
    return " ".join(quote(word) for word in words)


def has_control_characters(value: str) -> bool:
    """True when `value` holds a newline, tab, NUL or other control character."""
    return _CONTROL.search(value) is not None


def slurm_directive_value(value: str) -> str:
    """Quote a value for an `#SBATCH` line (Slurm groups quotes, backslash escapes).

    Callers must have refused control characters: a newline would end the directive.
    """
    if has_control_characters(value):
        raise ValueError(f"directive value {value!r} contains a control character")
    if value and _PLAIN_DIRECTIVE.match(value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def slurm_filename(path: str) -> str:
    """A path for sbatch --output/--error/--input: '%' is Slurm's pattern character."""
    return path.replace("%", "%%")


def pbs_directive_safe(value: str) -> bool:
    """True when `value` can stand unquoted in a `#PBS` line (no blanks, quotes or controls)."""
    return (
        bool(value)
        and re.search(r"[\s\"'\\#]", value) is None
        and not has_control_characters(value)
    )
