"""STAND-IN for Slurm's sbatch, squeue, scancel and scontrol, which never runs a job (safety).

The official-conformance test points the gateway at a Slurm resource and puts this first on
the server's PATH: a submitted script is only stored (in `$STANDIN_SLURM_STATE`), so no
generated JobSpec (executable, `pre_launch`, output paths...) is ever executed. Every job
stays PENDING until it is cancelled. Usage: `python standin_slurm.py COMMAND ARGS...`.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path


def _state() -> Path:
    folder = Path(os.environ["STANDIN_SLURM_STATE"])
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _next_id(state: Path) -> str:
    with (state / "counter.lock").open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        counter = state / "counter"
        number = int(counter.read_text()) + 1 if counter.exists() else 1000
        counter.write_text(str(number))
        return str(number)


def sbatch(args: list[str]) -> int:
    state = _state()
    tag = next((a.split("=", 1)[1] for a in args if a.startswith("--comment=")), "")
    job_id = _next_id(state)
    (state / f"{job_id}.sh").write_text(sys.stdin.read())
    (state / f"{job_id}.tag").write_text(tag)
    print(job_id)
    return 0


def squeue(args: list[str]) -> int:
    state = _state()
    for tag_file in sorted(state.glob("*.tag")):
        job_id = tag_file.stem
        native = "CANCELLED" if (state / f"{job_id}.canceled").exists() else "PENDING"
        print(f"{job_id}|{native}|{tag_file.read_text() or '(null)'}|None")
    return 0


def scancel(args: list[str]) -> int:
    state = _state()
    job_id = args[-1] if args else ""
    if not job_id.isdigit() or not (state / f"{job_id}.tag").exists():
        print("scancel: error: Invalid job id specified", file=sys.stderr)
        return 1
    (state / f"{job_id}.canceled").touch()
    return 0


def scontrol(args: list[str]) -> int:
    state = _state()
    job_id = next((a.split("=", 1)[1] for a in args if a.startswith("JobId=")), "")
    if not job_id.isdigit() or not (state / f"{job_id}.tag").exists():
        print("slurm_update error: Invalid job id specified", file=sys.stderr)
        return 1
    if (state / f"{job_id}.canceled").exists():
        print("slurm_update error: Job/step already completing or completed", file=sys.stderr)
        return 1
    with (state / f"{job_id}.updates").open("a") as updates:
        updates.write(" ".join(args) + "\n")
    return 0


COMMANDS = {"sbatch": sbatch, "squeue": squeue, "scancel": scancel, "scontrol": scontrol}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(
            f"stand-in slurm: no command {argv[:1]}; known: {', '.join(COMMANDS)}", file=sys.stderr
        )
        return 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
