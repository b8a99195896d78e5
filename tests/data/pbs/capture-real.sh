#!/bin/bash
# Capture tests/data/pbs/real-*.json from the running OpenPBS of scripts/pbs (as root; jobs
# run as alice). Each document is `qstat -f -F json -x ID` of one job in one state, as
# printed; only the bulky PBS_O_PATH is shortened. The jobs are deleted (history purged) at
# the end. Usage: tests/data/pbs/capture-real.sh [out-dir]
set -euo pipefail
out=$(cd "${1:-$(dirname "$0")}" && pwd)
work=$(mktemp -d /tmp/iri-pbs-capture-XXXXXX)
chmod 777 "$work"
cd "$work"
job() {  # job NAME 'command' [qsub options...]: submit as alice, print the id
    local name=$1 command=$2
    shift 2
    printf '#!/bin/bash\n#PBS -N %s\n#PBS -l select=1:ncpus=1\n#PBS -l walltime=00:05:00\n#PBS -j oe\n#PBS -o %s/%s.out\n%s\n' \
        "$name" "$work" "$name" "$command" >"$name.sh"
    runuser -u alice -- qsub -v IRI_GATEWAY_TAG=iri-gateway:capture-"$name" "$@" "$work/$name.sh"
}
state() { qstat -f -F json -x "$1" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read(), strict=False)["Jobs"][sys.argv[1]]["job_state"])' "$1"; }
wait_state() {  # wait_state ID LETTER
    for _ in $(seq 240); do [ "$(state "$1")" = "$2" ] && return 0; sleep 0.5; done
    echo "$1 never reached $2" >&2; return 1
}
ok=$(job ok 'exit 0'); fail=$(job fail 'exit 3'); sig=$(job signal 'kill -KILL $$')
wall=$(job walltime 'sleep 100' -l walltime=00:00:02); run=$(job running 'sleep 300')
delrun=$(job delrun 'sleep 300'); held=$(job held 'true' -h); delq=$(job delqueued 'true' -h)
never=$(job never 'true' -l select=1:ncpus=99)
odd=$(job odd 'true' -h -A "$(printf 'back\\slash\003')")
accented=$(job accented 'true' -h -A 'café€')
wait_state "$run" R; wait_state "$delrun" R
runuser -u alice -- qdel "$delrun" "$delq"
for id in "$ok" "$fail" "$sig" "$wall" "$delrun" "$delq"; do wait_state "$id" F; done
for _ in $(seq 20); do qstat -f -F json -x "$never" | grep -q 'Can Never Run' && break; sleep 0.5; done
save() {  # save NAME ID...: the document as qstat printed it, PBS_O_PATH shortened
    qstat -f -F json -x "${@:2}" \
        | sed -E 's|("PBS_O_PATH":")[^"]*"|\1/usr/local/bin:/usr/bin:/bin"|' >"$out/real-$1.json" || true
}
save queued-never "$never"; save held "$held"; save running "$run"; save finished-ok "$ok"
save failed-exit3 "$fail"; save killed-signal "$sig"; save walltime-killed "$wall"
save deleted-running "$delrun"; save deleted-queued "$delq"; save control-characters "$odd"
save non-ascii "$accented"
save several-jobs "$ok" "$fail" "$run" "$held" 99999.pbshost
save no-jobs 99999.pbshost
for id in "$ok" "$fail" "$sig" "$wall" "$run" "$delrun" "$held" "$delq" "$never" "$odd" "$accented"; do
    qdel -x -W force "$id" 2>/dev/null || true
done
rm -rf "$work"
