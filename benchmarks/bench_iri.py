"""The IRI implementation requirements' query mix (issue 25), on SQLite and PostgreSQL.

Why: the IRI project asks an implementation for P2, at least 1,000 query requests/s, and P4,
p90 <= 200 ms and p99 <= 500 ms; issue 25 sets the gateway's own targets above that (>= 2,000
requests/s with p99 <= 200 ms on PostgreSQL with two processes, >= 1,500 on SQLite). This
measures the mix the issue measured, side by side in one run, and where the CPU goes.

The mix, chosen per request by wrk's Lua script: getJob 50 %, getJobs 20 % (the caller's
unfinished jobs on the resource, a page of `--page`), getResources 20 %, ls of a job folder
10 %, over `--jobs` jobs of two users (alice and bob, half each). Each wrk thread is one user
on one server: its connections send that user's token and ask only for that user's jobs and
folders. The jobs are held jobs on the test cluster's `cluster` resource (`begin: now+1hour`,
as bench_launch.py launches them): the production shape, a Slurm resource whose poller
watches every one of them each cycle; the `local` resource would run them to the end, leaving
getJobs (unfinished jobs) an empty list and the poller nothing to do. All are cancelled at
the end by name.

Configurations, in turn in one run (`--configs`):
- `sqlite`: one `serve`, its SQLite store;
- `pg`: one `serve` on a fresh PostgreSQL database (dropped at the end);
- `pg-workers2`: `serve --workers 2` on it (skipped, said "not available", when this
  gateway's `serve --help` has no `--workers`);
- `pg-replicas2`: two `serve` processes on it, each with half the connections.
The PostgreSQL configurations share one data directory and one database: the jobs are
launched once, by the first. Servers run with rates no client reaches (the default 200
requests/s per user would answer 429).

Per configuration: requests/s, p50/p90/p99 (over all operations: wrk gives no latency per
operation), requests sent and answers not 2xx per operation (attributed by the problem's
`instance`; any is a fault: the script exits 1 after printing every figure), and CPU ms per
request of serve (every process of its tree: uvicorn's workers, the commands it ran), of
PostgreSQL, of wrk and of the whole machine, read from /proc; then P2/P4 and the issue's
targets, met or missed.

    SLURM_CONF=/tmp/iri-cluster/slurm.conf .venv/bin/python benchmarks/bench_iri.py \\
        --jobs 300 --connections 100 --threads 4 --seconds 30
    ... --quick     # 20 jobs, 8 connections, 2 s each (checks the script, not the speed)
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    POSTGRES_OPTION,
    Option,
    Postgres,
    cluster_run,
    fresh_database,
    launch_held,
    machine_busy,
    parse_options,
    postgres_cpu,
    postgres_url,
    tree_spent,
    tree_times,
    wait_ready,
)
from bench_launch import RESOURCE

from tests.integration.gateway_process import API
from tests.support.serve import CLI, clean_env, issue_token, running_serve

CONFIGS = ("sqlite", "pg", "pg-workers2", "pg-replicas2")
USERS = ("alice", "bob")
OPERATIONS = ("getJob", "getJobs", "getResources", "ls")
UNHURRIED = {"IRI_GATEWAY_READ_RATE": "1000000", "IRI_GATEWAY_WRITE_RATE": "1000000"}
"""Rates no client of the benchmark reaches (as tests/conftest.py's UNHURRIED)."""

MIX_LUA = """
-- The IRI mix, chosen per request: getJob 50 %, getJobs 20 %, getResources 20 %, ls 10 %.
-- Thread n talks to target (n mod #targets) as user ((n div #targets) mod #users): every
-- connection of a thread sends that user's token and names only that user's jobs.
local targets, users, threads = {}, {}, {}
for t in string.gmatch(os.getenv("BENCH_TARGETS"), "[^,]+") do targets[#targets + 1] = t end
for u in string.gmatch(os.getenv("BENCH_USERS"), "[^,]+") do users[#users + 1] = u end
local gap = tonumber(os.getenv("BENCH_DELAY_MS") or "0")

function setup(thread)
  local n = #threads
  local host, port = targets[(n % #targets) + 1]:match("([^:]+):(%d+)")
  thread.addr = wrk.lookup(host, port)[1]
  thread:set("user", users[(math.floor(n / #targets) % #users) + 1])
  thread:set("seed", n + 1)
  threads[n + 1] = thread
end

function init(args)
  math.randomseed(os.time() * 100 + seed)
  ids, dirs = {}, {}
  for line in io.lines(os.getenv("BENCH_JOBS") .. "/" .. user .. ".txt") do
    local id, dir = line:match("^(%S+) (.+)$")
    ids[#ids + 1] = id
    dirs[#dirs + 1] = dir
  end
  local token = os.getenv("BENCH_TOKEN_" .. user)
  get = {["Authorization"] = "Bearer " .. token, ["X-IRI-Facility-Project"] = "proj1"}
  post = {["Authorization"] = "Bearer " .. token, ["X-IRI-Facility-Project"] = "proj1",
          ["Content-Type"] = "application/json"}
  api = os.getenv("BENCH_API")
  resource = os.getenv("BENCH_RESOURCE")
  page = os.getenv("BENCH_PAGE")
  s1, s2, s3, s4, f1, f2, f3, f4, f0 = 0, 0, 0, 0, 0, 0, 0, 0, 0
  failure = ""
end

function request()
  local r = math.random(100)
  local j = math.random(#ids)
  if r <= 50 then
    s1 = s1 + 1
    return wrk.format("GET", api .. "/compute/status/" .. resource .. "/" .. ids[j], get)
  elseif r <= 70 then
    s2 = s2 + 1
    return wrk.format("POST", api .. "/compute/status/" .. resource .. "?limit=" .. page, get)
  elseif r <= 90 then
    s3 = s3 + 1
    return wrk.format("GET", api .. "/status/resources", get)
  end
  s4 = s4 + 1
  return wrk.format("POST", api .. "/filesystem/ls/" .. resource, post,
                    '{"path": "' .. dirs[j] .. '"}')
end

-- An answer not 2xx is counted against its operation, named by the problem's `instance`
-- (the URL asked for); one without it (not a problem document) counts as unattributed.
function response(status, headers, body)
  if status < 300 then return end
  local url = body:match('"instance"%s*:%s*"([^"]*)"') or ""
  if url:find("/filesystem/ls/", 1, true) then f4 = f4 + 1
  elseif url:find("/status/resources", 1, true) then f3 = f3 + 1
  elseif url:find("/compute/status/[^/?]+/[^/?]+") then f1 = f1 + 1
  elseif url:find("/compute/status/", 1, true) then f2 = f2 + 1
  else f0 = f0 + 1 end
  failure = status .. " " .. url .. " " .. body:sub(1, 300)
end

if gap > 0 then
  function delay() return gap end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %d %d %d %d %d %d %d %d %d %d\\n", summary.requests,
    summary.duration, e.connect + e.read + e.write, e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    latency.mean))
  local names = {"getJob", "getJobs", "getResources", "ls"}
  local sent, failed, unknown = {0, 0, 0, 0}, {0, 0, 0, 0}, 0
  for _, thread in ipairs(threads) do
    for k = 1, 4 do
      sent[k] = sent[k] + thread:get("s" .. k)
      failed[k] = failed[k] + thread:get("f" .. k)
    end
    unknown = unknown + thread:get("f0")
    local last = thread:get("failure")
    if last ~= "" then io.write("FAILURE " .. last:gsub("\\n", " ") .. "\\n") end
  end
  for k = 1, 4 do io.write(string.format("OP %s %d %d\\n", names[k], sent[k], failed[k])) end
  io.write(string.format("OP unattributed 0 %d\\n", unknown))
end
"""


@dataclass
class Mix:
    """What one wrk run of the mix measured: counts, latency (ms) and CPU seconds."""

    config: str
    requests: int
    seconds: float
    socket_errors: int
    timeouts: int
    p50: float
    p90: float
    p99: float
    sent: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    def faults(self) -> list[str]:
        found = [f"{self.config}: {n} {op} answers not 2xx" for op, n in self.failed.items() if n]
        if self.socket_errors or self.timeouts:
            found.append(
                f"{self.config}: {self.socket_errors} socket errors, {self.timeouts} timeouts"
            )
        return found + [f"{self.config}: e.g. {line}" for line in self.failures[:2]]


@dataclass
class Target:
    """Where the mix is sent: the servers (URL and process id), the users' tokens and jobs."""

    servers: list[tuple[str, int]]
    tokens: dict[str, str]
    jobs: Path
    """A folder with a file per user: a line per job, `id directory`."""


def start_wrk(
    target: Target, args: argparse.Namespace, seconds: float, delay_ms: float = 0.0
) -> subprocess.Popen[str]:
    """wrk sending the mix to the target's servers for `seconds` (each connection waiting
    `delay_ms` between its requests: a steady rate), its output piped."""
    groups = len(target.servers) * len(USERS)
    if args.threads % groups or args.connections % args.threads:
        raise SystemExit(
            f"--threads {args.threads} must be a multiple of {groups} (servers x users: each "
            f"thread is one user on one server) and --connections {args.connections} a "
            "multiple of --threads"
        )
    script = target.jobs / "mix.lua"
    script.write_text(MIX_LUA)
    env = {
        **os.environ,
        "BENCH_TARGETS": ",".join(url.removeprefix("http://") for url, _ in target.servers),
        "BENCH_USERS": ",".join(USERS),
        "BENCH_JOBS": str(target.jobs),
        "BENCH_API": API,
        "BENCH_RESOURCE": RESOURCE,
        "BENCH_PAGE": str(args.page),
        "BENCH_DELAY_MS": f"{delay_ms:g}",
        **{f"BENCH_TOKEN_{user}": token for user, token in target.tokens.items()},
    }
    argv = [
        "wrk",
        f"-t{args.threads}",
        f"-c{args.connections}",
        f"-d{seconds:g}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        target.servers[0][0],
    ]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def wrk_result(config: str, wrk: subprocess.Popen[str], seconds: float) -> Mix:
    """The figures of a wrk run of the mix, once it ends (within `seconds` + 2 minutes)."""
    stdout, stderr = wrk.communicate(timeout=seconds + 120)
    lines = stdout.splitlines()
    result = next((line.split()[1:] for line in lines if line.startswith("RESULT ")), None)
    if wrk.returncode != 0 or result is None:
        raise SystemExit(f"wrk failed ({wrk.returncode}):\n{stdout}\n{stderr}")
    count, micros, sockets, timeouts, _, p50, p90, p99, _, _ = (int(float(v)) for v in result)
    mix = Mix(config, count, micros / 1e6, sockets, timeouts, p50 / 1e3, p90 / 1e3, p99 / 1e3)
    for line in lines:
        if line.startswith("OP "):
            _, name, sent, failed = line.split()
            mix.sent[name], mix.failed[name] = int(sent), int(failed)
        elif line.startswith("FAILURE "):
            mix.failures.append(line.removeprefix("FAILURE "))
    return mix


def run_mix(
    config: str, target: Target, args: argparse.Namespace, postgres: Postgres | None = None
) -> Mix:
    """The mix for `args.seconds`, after `args.warmup` seconds not measured (connections,
    first imports, caches; its answers are checked all the same); the CPU time that serve
    (every process of each server's tree), PostgreSQL, wrk and the machine spent."""
    if args.warmup > 0:
        warm = wrk_result(config, start_wrk(target, args, args.warmup), args.warmup)
        if warm.faults():
            raise SystemExit(f"the warm-up failed: {warm.faults()}")
    serve_before = [tree_times(pid) for _, pid in target.servers]
    postgres_before = postgres_cpu(postgres) if postgres else 0.0
    busy_before = machine_busy()[0]
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    mix = wrk_result(config, start_wrk(target, args, args.seconds), args.seconds)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    mix.cpu = {
        "serve": sum(
            tree_spent(before, tree_times(pid))
            for before, (_, pid) in zip(serve_before, target.servers, strict=True)
        ),
        "PostgreSQL": postgres_cpu(postgres) - postgres_before if postgres else 0.0,
        "wrk": usage.ru_utime + usage.ru_stime - children.ru_utime - children.ru_stime,
        "machine": machine_busy()[0] - busy_before,
    }
    return mix


# --- servers and jobs -----------------------------------------------------------------------


def workers_available() -> bool:
    """Whether this gateway's `serve` has `--workers` (another part of issue 25 adds it)."""
    helped = subprocess.run(
        [*CLI, "serve", "--help"], capture_output=True, text=True, check=True, env=clean_env()
    )
    return "--workers" in helped.stdout


@contextmanager
def servers(
    profile: Path, data: Path, env: dict[str, str], count: int = 1, args: tuple[str, ...] = ()
) -> Iterator[list[tuple[str, int]]]:
    """`count` serve processes on one data directory (ARGS added), ready; their URLs and
    process ids. Stopped afterwards."""
    with ExitStack() as stack:
        started = []
        for number in range(count):
            served = stack.enter_context(
                running_serve(
                    data,
                    args=("--profiles", str(profile), *args),
                    extra_env={**UNHURRIED, **env},
                    log=data.parent / f"{data.name}-serve-{uuid.uuid4().hex[:6]}-{number}.log",
                    stop_timeout=30,
                )
            )
            wait_ready(served.url)
            started.append((served.url, served.process.pid))
        yield started


def seed(target: Target, jobs: int, name: str) -> None:
    """`jobs` held jobs, half of them each user's, launched through the first server; each
    user's ids and job folders written to the target's jobs folder."""
    url = target.servers[0][0]
    for number, user in enumerate(USERS):
        share = jobs // len(USERS) + (1 if number < jobs % len(USERS) else 0)
        launched = launch_held(url, target.tokens[user], name, share)
        lines = [f"{job['id']} {job['directory']}" for job in launched]
        (target.jobs / f"{user}.txt").write_text("\n".join(lines) + "\n")


def tokens(data: Path, env: dict[str, str]) -> dict[str, str]:
    return {user: issue_token(data, user, "proj1", env) for user in USERS}


# --- report ---------------------------------------------------------------------------------


def report(mixes: list[Mix], skipped: list[str]) -> list[str]:
    """The tables and the targets; the faults found (answers not 2xx, socket errors)."""
    print()
    print(
        f"{'config':<13} {'requests':>8} {'s':>6} {'req/s':>7} {'p50 ms':>7} {'p90 ms':>7} "
        f"{'p99 ms':>7}   CPU ms per request: {'serve':>6} {'PG':>6} {'wrk':>6} {'machine':>7}"
    )
    for mix in mixes:
        per = {key: value / max(mix.requests, 1) * 1000 for key, value in mix.cpu.items()}
        print(
            f"{mix.config:<13} {mix.requests:>8} {mix.seconds:>6.1f} {mix.rate:>7.0f} "
            f"{mix.p50:>7.1f} {mix.p90:>7.1f} {mix.p99:>7.1f}   {'':<19} {per['serve']:>6.2f} "
            f"{per['PostgreSQL']:>6.2f} {per['wrk']:>6.2f} {per['machine']:>7.2f}"
        )
    for config in skipped:
        print(f"{config:<13} not available (this gateway's `serve` has no --workers)")
    print()
    print("requests sent / answers not 2xx, per operation")
    for mix in mixes:
        print(
            f"{mix.config:<13} "
            + ", ".join(
                f"{op} {mix.sent.get(op, 0)} / {mix.failed.get(op, 0)}" for op in OPERATIONS
            )
            + f", unattributed not 2xx {mix.failed.get('unattributed', 0)}"
        )
    print()

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    for mix in mixes:
        rate, tail = mix.rate, f"({mix.rate:.0f} req/s, p90 {mix.p90:.0f} ms, p99 {mix.p99:.0f} ms)"
        lines = [
            f"P2 >= 1,000 req/s {verdict(rate >= 1000)}",
            f"P4 p90 <= 200 ms and p99 <= 500 ms {verdict(mix.p90 <= 200 and mix.p99 <= 500)}",
        ]
        if mix.config == "sqlite":
            lines.append(f"issue 25 >= 1,500 req/s {verdict(rate >= 1500)}")
        elif mix.config in ("pg-workers2", "pg-replicas2"):
            lines.append(
                f"issue 25 >= 2,000 req/s with p99 <= 200 ms "
                f"{verdict(rate >= 2000 and mix.p99 <= 200)}"
            )
        print(f"{mix.config:<13} {tail}: " + "; ".join(lines))
    faults = [fault for mix in mixes for fault in mix.faults()]
    print("faults: " + ("; ".join(faults) if faults else "none"))
    return faults


def mix_options(connections: int, threads: int) -> list[Option]:
    """The options of the mix (here and in bench_soak.py), with these defaults."""
    return [
        ("--jobs", int, 300, "jobs, half of them each user's"),
        ("--connections", int, connections, "keep-alive connections"),
        ("--threads", int, threads, "wrk threads (each one user on one server)"),
        ("--page", int, 100, "getJobs' limit (the API's default)"),
    ]


OPTIONS: list[Option] = [
    ("--configs", str, ",".join(CONFIGS), "of " + ", ".join(CONFIGS)),
    *mix_options(100, 4),
    ("--seconds", float, 30.0, "time per configuration"),
    ("--warmup", float, 5.0, "seconds of the mix before each measured run (not measured)"),
    POSTGRES_OPTION,
]


def main() -> None:
    quick = {"jobs": 20, "connections": 8, "seconds": 2.0, "warmup": 1.0}
    args = parse_options(__doc__, OPTIONS, quick)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        raise SystemExit(f"--configs: unknown {unknown}; offered: {', '.join(CONFIGS)}")
    skipped = []
    if "pg-workers2" in configs and not workers_available():
        configs.remove("pg-workers2")
        skipped.append("pg-workers2")
        print("pg-workers2: not available (this gateway's `serve` has no --workers)", flush=True)
    mixes: list[Mix] = []
    with cluster_run("bench-iri") as (folder, profile, run, names):
        if "sqlite" in configs:
            data, env = folder / "sqlite", dict[str, str]()
            data.mkdir()
            users = tokens(data, env)
            with servers(profile, data, env) as started:
                target = Target(started, users, data)
                names.append(f"{run}-sqlite")
                seed(target, args.jobs, names[-1])
                mixes.append(run_mix("sqlite", target, args))
                print(f"sqlite: {mixes[-1].rate:.0f} req/s", flush=True)
        pg_configs = [c for c in configs if c.startswith("pg")]
        if pg_configs:
            with fresh_database(postgres_url(args.postgres)) as (url, admin, database):
                postgres = Postgres(admin, database)
                data, env = folder / "pg", {"IRI_GATEWAY_DATABASE_URL": url}
                data.mkdir()
                users = tokens(data, env)
                for config in pg_configs:
                    count, extra = {
                        "pg": (1, ()),
                        "pg-workers2": (1, ("--workers", "2")),
                        "pg-replicas2": (2, ()),
                    }[config]
                    with servers(profile, data, env, count, extra) as started:
                        target = Target(started, users, data)
                        if f"{run}-pg" not in names:  # the first: the jobs, once
                            names.append(f"{run}-pg")
                            seed(target, args.jobs, names[-1])
                        mixes.append(run_mix(config, target, args, postgres))
                        print(f"{config}: {mixes[-1].rate:.0f} req/s", flush=True)
    faults = report(mixes, skipped)
    if faults:
        raise SystemExit(f"{len(faults)} faults: the figures above are not a valid run")


if __name__ == "__main__":
    main()
