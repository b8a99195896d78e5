"""Start-up of the command line: whole `iri-gateway` processes, timed from outside.

Scripts call the command line in loops, so what counts is the wall time of a whole process,
interpreter start and imports included. Each round runs every case once, in turn, after the
interpreter floor (`python -c pass`): the ratio to the floor is taken round by round, so it
stays meaningful when the machine's speed drifts during the run. The figure to quote is the
median; min and max show the spread (a wide one means a noisy machine). CPU is the child's
user + system time.

    python benchmarks/bench_cli.py [--runs 15] [--compare OLD_CHECKOUT]

Cases: `--help`, `render`, `plan` and `capabilities` (the example GPU+MPI job on
perlmutter-gpu), with the shipped profiles' parsed trees in a warm cache as after a first call,
and `render` with an empty cache each time (a first call). With `--compare DIR`, the same four
commands also run from an older checkout of the repository (e.g. `git worktree add
/tmp/iri-before <commit>`), its package put first on PYTHONPATH.

Bytecode is written as an installed package has it (PYTHONDONTWRITEBYTECODE is removed from the
children's environment) and warm-up runs come first, so no run compiles a module.

Target (issue 12): < 150 ms for `--help`, `render`, `plan` and `capabilities`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

TARGET_MS = 150.0
REPOSITORY = Path(__file__).resolve().parent.parent
EXAMPLE = REPOSITORY / "examples" / "gpu-mpi-job.json"
COMMANDS: dict[str, list[str]] = {
    "--help": ["--help"],
    "render": ["render", str(EXAMPLE), "--resource", "perlmutter-gpu"],
    "plan": ["plan", str(EXAMPLE), "--resource", "perlmutter-gpu"],
    "capabilities": ["capabilities"],
}


@dataclass
class Case:
    """One command line, how it is run, and its measured runs."""

    name: str
    argv: list[str]
    env: dict[str, str]
    fresh_cache: bool = False
    target: bool = True
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)


def run_once(case: Case, scratch: Path) -> tuple[float, float]:
    """Run the case once; its wall and CPU seconds. A failing command stops the benchmark."""
    env = case.env
    if case.fresh_cache:
        env = {**env, "XDG_CACHE_HOME": tempfile.mkdtemp(dir=scratch)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(
        case.argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"{case.name}: exit {result.returncode}\n{result.stderr.decode()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def command_line() -> list[str]:
    """The installed console script beside this interpreter, else `python -m iri_gateway`."""
    script = Path(sys.executable).parent / "iri-gateway"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "iri_gateway"]


def cases(scratch: Path, compare: Path | None) -> list[Case]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")
    }
    env["XDG_CACHE_HOME"] = str(scratch / "warm-cache")
    gateway = command_line()
    found = [Case("python -c pass", [sys.executable, "-c", "pass"], env, target=False)]
    found += [Case(name, [*gateway, *args], env) for name, args in COMMANDS.items()]
    found.append(
        Case(
            "render, empty cache",
            [*gateway, *COMMANDS["render"]],
            env,
            fresh_cache=True,
            target=False,
        )
    )
    if compare is not None:
        old = {**env, "PYTHONPATH": str(compare)}
        found += [
            Case(f"{name} (before)", [*gateway, *args], old, target=False)
            for name, args in COMMANDS.items()
        ]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="measured runs of each case")
    parser.add_argument("--warmup", type=int, default=2, help="runs first, not measured")
    parser.add_argument("--compare", type=Path, help="an older checkout to run as 'before'")
    args = parser.parse_args()
    if args.compare is not None and not (args.compare / "iri_gateway").is_dir():
        sys.exit(f"--compare {args.compare}: no iri_gateway package there")
    with tempfile.TemporaryDirectory(prefix="iri-bench-cli-") as folder:
        scratch = Path(folder)
        measured = cases(scratch, args.compare)
        for _ in range(args.warmup):
            for case in measured:
                run_once(case, scratch)
        for _ in range(args.runs):
            floor = 0.0
            for case in measured:
                wall, cpu = run_once(case, scratch)
                floor = floor or wall
                case.wall.append(wall)
                case.cpu.append(cpu)
                case.ratio.append(wall / floor)
    table = Table(title=f"Whole-process start-up, {args.runs} runs each (ms)")
    for column in ("command", "median", "min", "max", "CPU median", "x floor", "< 150 ms"):
        table.add_column(column, justify="left" if column == "command" else "right")
    for case in measured:
        median = statistics.median(case.wall) * 1000
        table.add_row(
            case.name,
            f"{median:.0f}",
            f"{min(case.wall) * 1000:.0f}",
            f"{max(case.wall) * 1000:.0f}",
            f"{statistics.median(case.cpu) * 1000:.0f}",
            f"{statistics.median(case.ratio):.1f}",
            ("yes" if median < TARGET_MS else "NO") if case.target else "",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
