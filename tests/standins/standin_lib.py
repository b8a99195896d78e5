"""Shared code of the STAND-IN programs in this folder (see README.md); not a program itself.

Every stand-in appends one JSON line to the file named by `IRI_STANDIN_LOG` and then behaves
as its real program's documented command line says: it parses the options, and executes the
command it was asked to run, once. Nothing here talks to a scheduler or a container engine.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

LOG_VARIABLE = "IRI_STANDIN_LOG"
# The PATH a fresh OCI container gets when the image sets none (podman, apptainer).
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class UsageError(Exception):
    """The command line does not follow the real program's grammar."""


def record(program: str, argv: Sequence[str], **details: Any) -> None:
    """Append {"program", "argv", "env", "cwd", "pid", ...details} to the log; die loudly
    without one."""
    path = os.environ.get(LOG_VARIABLE)
    if not path:
        sys.stderr.write(
            f"STAND-IN {program}: {LOG_VARIABLE} is not set; a stand-in runs only under the "
            "shell-safety tests\n"
        )
        sys.exit(97)
    entry: dict[str, Any] = {
        "program": program,
        "argv": list(argv),
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "pid": os.getpid(),  # kept by the exec that follows: links a launch to what it ran
    }
    entry.update(details)
    line = (json.dumps(entry) + "\n").encode("ascii")
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, line)
    finally:
        os.close(descriptor)


def fail(program: str, argv: Sequence[str], message: str) -> NoReturn:
    """Log the refused call, say why on stderr, and exit 2 as a usage error does."""
    record(program, argv, error=message)
    sys.stderr.write(f"STAND-IN {program}: {message}\n")
    sys.exit(2)


def run(program: str, command: Sequence[str], env: Mapping[str, str] | None = None) -> NoReturn:
    """Replace this process with `command` (looked up in PATH, as execvp does): one process."""
    if not command:
        sys.stderr.write(f"STAND-IN {program}: no command to run\n")
        sys.exit(2)
    sys.stdout.flush()
    try:
        if env is None:
            os.execvp(command[0], list(command))
        os.execvpe(command[0], list(command), dict(env))
    except OSError as error:
        sys.stderr.write(f"STAND-IN {program}: cannot execute {command[0]!r}: {error}\n")
        sys.exit(127)


def parse_options(
    args: Sequence[str],
    *,
    with_value: Mapping[str, str],
    flags: Mapping[str, str],
    optional_value: Mapping[str, str] | None = None,
    bool_values: bool = False,
) -> tuple[list[tuple[str, str | None]], list[str]]:
    """Options up to the first operand, getopt_long style (the operand and rest are returned).

    `with_value` and `flags` map every spelling (`--bind`, `-B`) to a canonical name. Long
    options take `--name=value` or `--name value`; short ones `-Bvalue` or `-B value`, and
    short flags may be clustered (`-ec`). `optional_value` options take a value only after
    `=`. With `bool_values`, flags also accept `--flag=true|false` (Go's pflag). `--` ends
    the options. Anything else starting with `-` is an unknown option: UsageError.
    """
    optional_value = optional_value or {}
    parsed: list[tuple[str, str | None]] = []
    index = 0
    while index < len(args):
        word = args[index]
        if word == "--":
            index += 1
            break
        if not word.startswith("-") or word == "-":
            break
        if word.startswith("--"):
            name, equals, value = word.partition("=")
            if name in with_value:
                if not equals:
                    index += 1
                    if index >= len(args):
                        raise UsageError(f"option {name} needs a value")
                    value = args[index]
                parsed.append((with_value[name], value))
            elif name in optional_value:
                parsed.append((optional_value[name], value if equals else None))
            elif name in flags:
                if equals and not (bool_values and value in ("true", "false")):
                    raise UsageError(f"option {name} takes no value (got {value!r})")
                if value != "false":
                    parsed.append((flags[name], None))
            else:
                raise UsageError(f"unknown option {name}")
        else:
            position = 1
            while position < len(word):
                name = "-" + word[position]
                if name in with_value:
                    value = word[position + 1 :]
                    if not value:
                        index += 1
                        if index >= len(args):
                            raise UsageError(f"option {name} needs a value")
                        value = args[index]
                    parsed.append((with_value[name], value))
                    break
                if name in flags:
                    parsed.append((flags[name], None))
                    position += 1
                    continue
                raise UsageError(f"unknown option {name} in {word!r}")
        index += 1
    return parsed, list(args[index:])


def values(options: Iterable[tuple[str, str | None]], name: str) -> list[str]:
    """Every value given for option `name`, in order."""
    return [value for key, value in options if key == name and value is not None]


def last(options: Iterable[tuple[str, str | None]], name: str) -> str | None:
    """The last value given for option `name` (later options win), or None."""
    found = values(options, name)
    return found[-1] if found else None


def present(options: Iterable[tuple[str, str | None]], name: str) -> bool:
    """True when option `name` was given at all."""
    return any(key == name for key, _ in options)


def flag_names(options: Iterable[tuple[str, str | None]]) -> list[str]:
    """The names of the options given without a value (the booleans), in order."""
    return [key for key, value in options if value is None]


def parse_permuted(
    args: Sequence[str], *, with_value: Mapping[str, str], flags: Mapping[str, str]
) -> tuple[list[tuple[str, str | None]], list[str]]:
    """Options anywhere on the line, as GNU getopt_long permutes them (Slurm's scontrol,
    scancel): returns (options, the other words in order). `--` ends the options; short
    options may be clustered (`-oQ`) or carry their value (`-sTERM`); long ones take
    `--name=value` or `--name value`. An unknown option is a UsageError."""
    parsed: list[tuple[str, str | None]] = []
    operands: list[str] = []
    index = 0
    while index < len(args):
        word = args[index]
        index += 1
        if word == "--":
            operands += args[index:]
            break
        if not word.startswith("-") or word == "-":
            operands.append(word)
            continue
        if word.startswith("--"):
            name, equals, value = word.partition("=")
            if name in with_value:
                if not equals:
                    if index >= len(args):
                        raise UsageError(f"option {name} needs a value")
                    value = args[index]
                    index += 1
                parsed.append((with_value[name], value))
            elif name in flags:
                if equals:
                    raise UsageError(f"option {name} takes no value (got {value!r})")
                parsed.append((flags[name], None))
            else:
                raise UsageError(f"unknown option {name}")
            continue
        position = 1
        while position < len(word):
            name = "-" + word[position]
            if name in with_value:
                value = word[position + 1 :]
                if not value:
                    if index >= len(args):
                        raise UsageError(f"option {name} needs a value")
                    value = args[index]
                    index += 1
                parsed.append((with_value[name], value))
                break
            if name not in flags:
                raise UsageError(f"unknown option {name} in {word!r}")
            parsed.append((flags[name], None))
            position += 1
    return parsed, operands
