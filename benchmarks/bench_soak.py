"""Memory under a soak: the IRI mix at a steady rate against one `serve`, its RSS over time.

Why: issue 25 asks for a resident set that stays flat under a 2-minute soak once warm (it
measured +32 MiB in 2 minutes). A leak shows as a steady slope after the warm-up; a cache
filling up to its bound shows as growth that stops.

One `serve` (SQLite in its data directory; with `--database-url`, a fresh database on that
PostgreSQL server, dropped at the end; `--database-url` alone: scripts/postgres's server),
`--jobs` held jobs of two users on the test cluster's `cluster` resource (as bench_iri.py),
then wrk sends bench_iri.py's mix (getJob 50 %, getJobs 20 %, getResources 20 %, ls 10 %)
for `--warmup` + `--seconds`, each connection pausing between its requests so that the
whole stays near `--rate` requests/s (a steady load the server keeps up with, not its
maximum). The RSS of serve (its processes, not the commands it runs) is read from /proc
every `--every` seconds; the report is the RSS at the end of the warm-up and at the end, the
growth between them and its slope (least squares over the samples after the warm-up), and
the run's answers (any not 2xx is a fault: the script exits 1).

    SLURM_CONF=/tmp/iri-cluster/slurm.conf .venv/bin/python benchmarks/bench_soak.py \\
        --seconds 120 --warmup 30 --rate 500
    ... --database-url               # the same on PostgreSQL (scripts/postgres's server)
    ... --quick                      # 20 jobs, 6 s after 4 s of warm-up, sampled every 1 s
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _common import (
    Option,
    cluster_run,
    fresh_database,
    options_parser,
    postgres_url,
    rss_bytes,
    server_processes,
)
from bench_iri import Target, mix_options, seed, servers, start_wrk, tokens, wrk_result

MIB = 1024 * 1024


@contextmanager
def store(folder: Path, database: str | None) -> Iterator[tuple[Path, dict[str, str]]]:
    """The data directory and environment of the soak's serve: SQLite when `database` is
    None, else a fresh database on that PostgreSQL server ("": scripts/postgres's)."""
    data = folder / "data"
    data.mkdir()
    if database is None:
        yield data, {}
        return
    with fresh_database(postgres_url(database or None)) as (url, _, _):
        yield data, {"IRI_GATEWAY_DATABASE_URL": url}


def slope(samples: list[tuple[float, int]]) -> float:
    """Least-squares MiB per minute of (seconds, bytes) samples."""
    if len(samples) < 2:
        return 0.0
    fit = statistics.linear_regression([t for t, _ in samples], [b / MIB for _, b in samples])
    return fit.slope * 60


OPTIONS: list[Option] = [
    ("--seconds", float, 120.0, "measured, after the warm-up"),
    ("--warmup", float, 30.0, "seconds not counted in the growth"),
    ("--rate", float, 500.0, "requests/s, about"),
    *mix_options(20, 2),
    ("--every", float, 5.0, "seconds between RSS samples"),
]


def main() -> None:
    parser = options_parser(__doc__, OPTIONS, "20 jobs, 4 + 6 s, every 1 s")
    parser.add_argument(
        "--database-url",
        nargs="?",
        const="",
        help="a PostgreSQL server (its role may create databases); alone: scripts/postgres's",
    )
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.warmup, args.seconds, args.every = 20, 4.0, 6.0, 1.0
    # Each connection waits this long after each answer: `connections` such loops make
    # about `rate` requests/s (a little less: the answer's own time adds to the wait).
    delay_ms = args.connections / args.rate * 1000
    total = args.warmup + args.seconds
    with (
        cluster_run("bench-soak") as (folder, profile, run, names),
        store(folder, args.database_url) as (data, env),
    ):
        users = tokens(data, env)
        with servers(profile, data, env) as started:
            target = Target(started, users, data)
            names.append(f"{run}-soak")
            seed(target, args.jobs, names[-1])
            pids = server_processes(started[0][1])
            print(f"serve's RSS before the soak: {rss_bytes(pids) / MIB:.1f} MiB", flush=True)
            wrk = start_wrk(target, args, total, delay_ms)
            start = time.monotonic()
            samples: list[tuple[float, int]] = []
            while wrk.poll() is None and time.monotonic() - start < total + 60:
                samples.append((time.monotonic() - start, rss_bytes(pids)))
                print(f"{samples[-1][0]:6.1f} s  RSS {samples[-1][1] / MIB:8.1f} MiB", flush=True)
                time.sleep(max(0.0, args.every - (time.monotonic() - start) % args.every))
            mix = wrk_result("soak", wrk, total)
            samples.append((time.monotonic() - start, rss_bytes(pids)))
    after = [(t, b) for t, b in samples if t >= args.warmup]
    warm, end = after[0][1] if after else samples[0][1], samples[-1][1]
    print()
    print(
        f"{'SQLite' if args.database_url is None else 'PostgreSQL'}: {mix.requests} requests "
        f"in {mix.seconds:.0f} s ({mix.rate:.0f}/s, asked about {args.rate:.0f}); p50 "
        f"{mix.p50:.1f} ms, p99 {mix.p99:.1f} ms"
    )
    print(
        f"RSS after {args.warmup:g} s of warm-up {warm / MIB:.1f} MiB, at the end "
        f"{end / MIB:.1f} MiB: growth {(end - warm) / MIB:+.1f} MiB in "
        f"{samples[-1][0] - (after[0][0] if after else 0):.0f} s, slope "
        f"{slope(after):+.2f} MiB/min (issue 25 measured +32 MiB in 2 minutes; target: flat)"
    )
    faults = mix.faults()
    print("faults: " + ("; ".join(faults) if faults else "none"))
    if faults:
        raise SystemExit(f"{len(faults)} faults: the figures above are not a valid run")


if __name__ == "__main__":
    main()
