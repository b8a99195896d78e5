"""The command line shared by the podman and podman-hpc STAND-INs (see README.md).

`podman [global options] run [options] IMAGE [args...]`: podman-hpc passes podman's own options
through and adds its site module flags. The container's environment is built from `--env`
only (a container does not inherit the caller's environment) plus a default PATH; the command
is the entrypoint (`--entrypoint` as a JSON array, else the plain string) followed by the
arguments. Without `-i/--interactive` the container's standard input is not the caller's (as in
podman, it reads end-of-file). The working directory and mounts are logged, never entered.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
from collections.abc import Mapping, Sequence

from standin_lib import (
    CONTAINER_PATH,
    UsageError,
    fail,
    flag_names,
    last,
    parse_options,
    present,
    record,
    run,
    values,
)

_GLOBAL_WITH_VALUE = {
    "--log-level": "log-level",
    "--root": "root",
    "--runroot": "runroot",
    "--storage-driver": "storage-driver",
    "--cgroup-manager": "cgroup-manager",
    "--events-backend": "events-backend",
    "--url": "url",
    "--connection": "connection",
    "-c": "connection",
    "--identity": "identity",
    "--tmpdir": "tmpdir",
    "--runtime": "runtime",
    "--conmon": "conmon",
    "--network-cmd-path": "network-cmd-path",
}
_GLOBAL_FLAGS = {"--remote": "remote", "-r": "remote", "--syslog": "syslog"}
_RUN_WITH_VALUE = {
    "--network": "network",
    "--net": "network",
    "-v": "volume",
    "--volume": "volume",
    "--device": "device",
    "-e": "env",
    "--env": "env",
    "--env-file": "env-file",
    "-w": "workdir",
    "--workdir": "workdir",
    "--entrypoint": "entrypoint",
    "--name": "name",
    "-u": "user",
    "--user": "user",
    "-h": "hostname",
    "--hostname": "hostname",
    "--mount": "mount",
    "--tmpfs": "tmpfs",
    "--shm-size": "shm-size",
    "--cpus": "cpus",
    "-m": "memory",
    "--memory": "memory",
    "-l": "label",
    "--label": "label",
    "--security-opt": "security-opt",
    "--cap-add": "cap-add",
    "--cap-drop": "cap-drop",
    "--userns": "userns",
    "--ipc": "ipc",
    "--pid": "pid",
    "--uts": "uts",
    "--gpus": "gpus",
    "--annotation": "annotation",
    "--pull": "pull",
    "--platform": "platform",
    "--ulimit": "ulimit",
    "--group-add": "group-add",
    "-p": "publish",
    "--publish": "publish",
    "--cidfile": "cidfile",
    "--log-driver": "log-driver",
    "--log-opt": "log-opt",
    "--stop-signal": "stop-signal",
    "--stop-timeout": "stop-timeout",
    "--cgroupns": "cgroupns",
    "--umask": "umask",
    "--tz": "tz",
    "--pod": "pod",
    "--secret": "secret",
    "--hooks-dir": "hooks-dir",
    "--seccomp-policy": "seccomp-policy",
    "--arch": "arch",
}
_RUN_FLAGS = {
    "--rm": "rm",
    "-i": "interactive",
    "--interactive": "interactive",
    "-t": "tty",
    "--tty": "tty",
    "-d": "detach",
    "--detach": "detach",
    "--privileged": "privileged",
    "--init": "init",
    "-q": "quiet",
    "--quiet": "quiet",
    "--replace": "replace",
    "--read-only": "read-only",
    "--read-only-tmpfs": "read-only-tmpfs",
    "--no-hosts": "no-hosts",
    "-P": "publish-all",
    "--publish-all": "publish-all",
    "--env-host": "env-host",
    "--http-proxy": "http-proxy",
    "--rmi": "rmi",
}
_BOOKKEEPING = ("pull", "migrate", "images", "rmi")  # logged; they run no container


def _environment(options: Sequence[tuple[str, str | None]]) -> dict[str, str]:
    """The container's environment: --env-host, --env-file and --env, over a default PATH."""
    host = dict(os.environ)
    env = dict(host) if present(options, "env-host") else {}
    for path in values(options, "env-file"):
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                line = line.rstrip("\n")
                if line and not line.startswith("#"):
                    name, equals, value = line.partition("=")
                    if equals:
                        env[name] = value
                    elif name in host:
                        env[name] = host[name]
    for item in values(options, "env"):
        name, equals, value = item.partition("=")
        if equals:
            env[name] = value
        elif name.endswith("*"):
            env.update({k: v for k, v in host.items() if fnmatch.fnmatchcase(k, name)})
        elif name in host:
            env[name] = host[name]
    env.setdefault("PATH", CONTAINER_PATH)
    return env


def _entrypoint(text: str | None) -> list[str] | None:
    """podman's --entrypoint: a JSON array is the argv, anything else one plain string."""
    if text is None:
        return None
    if text == "":
        return []
    try:
        parsed = json.loads(text)
    except ValueError:
        return [text]
    if isinstance(parsed, list) and all(isinstance(item, str) for item in parsed):
        return parsed
    return [text]


def main(
    program: str,
    extra_flags: Mapping[str, str] | None = None,
    exclusive: Sequence[str] = (),
) -> None:
    """Run the stand-in `program`; `extra_flags` are site module flags, at most one of
    `exclusive` may be given (podman-hpc's MPI modules)."""
    argv = sys.argv[1:]
    flags = dict(_RUN_FLAGS)
    flags.update(extra_flags or {})
    try:
        _, rest = parse_options(
            argv, with_value=_GLOBAL_WITH_VALUE, flags=_GLOBAL_FLAGS, bool_values=True
        )
        if not rest:
            raise UsageError("no subcommand")
        subcommand, rest = rest[0], rest[1:]
        if subcommand in _BOOKKEEPING:
            record(program, argv, bookkeeping={"subcommand": subcommand, "args": rest})
            sys.exit(0)
        if subcommand != "run":
            raise UsageError(f"the stand-in knows run, pull and migrate, not {subcommand!r}")
        options, rest = parse_options(
            rest, with_value=_RUN_WITH_VALUE, flags=flags, bool_values=True
        )
        chosen = [name for name in exclusive if present(options, name)]
        if len(chosen) > 1:
            raise UsageError(f"--{' and --'.join(chosen)} are mutually exclusive")
        if not rest:
            raise UsageError("run needs an image")
    except UsageError as error:
        fail(program, argv, str(error))
    image, arguments = rest[0], rest[1:]
    entrypoint = _entrypoint(last(options, "entrypoint"))
    command = [*(entrypoint or []), *arguments]
    env = _environment(options)
    container = {
        "subcommand": subcommand,
        "image": image,
        "workdir": last(options, "workdir"),
        "mounts": values(options, "volume"),
        "devices": values(options, "device"),
        "network": last(options, "network"),
        "env": {k: v for k, v in env.items() if not (k == "PATH" and v == CONTAINER_PATH)},
        "entrypoint": entrypoint,
        "flags": flag_names(options),
        "options": options,
        "command": command,
    }
    record(program, argv, container=container)
    if not command:
        # The image's own entrypoint and command are unknown to a stand-in: nothing runs.
        sys.exit(0)
    if not present(options, "interactive"):
        descriptor = os.open(os.devnull, os.O_RDONLY)
        os.dup2(descriptor, 0)
        os.close(descriptor)
    run(program, command, env)
