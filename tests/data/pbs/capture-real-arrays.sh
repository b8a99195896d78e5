#!/bin/bash
# Capture tests/data/pbs/real-array-*.json from the running OpenPBS of scripts/pbs (as root; jobs
# run as alice). Each document is `qstat -f -F json -x -t ID` of array jobs in one state, as
# printed; only the bulky PBS_O_PATH is shortened. What qsub and qdel printed for arrays, the
# `%N` throttle and subjob ranges, with their exit codes, goes to real-array-commands.txt. The
# jobs are deleted (history purged) at the end. Usage: tests/data/pbs/capture-real-arrays.sh [out-dir]
set -euo pipefail
out=$(cd "${1:-$(dirname "$0")}" && pwd)
work=$(mktemp -d /tmp/iri-pbs-arrays-XXXXXX)
chmod 777 "$work"
cd "$work"
log=$out/real-array-commands.txt
: >"$log"
said() {  # said COMMAND...: run it as alice; log it, what it printed and its exit code; print stdout
    local rc=0
    runuser -u alice -- "$@" >"$work/stdout" 2>"$work/stderr" || rc=$?
    {
        printf '$ %s\n' "$*" | sed "s|$work|WORK|g"
        sed "s|$work|WORK|g" "$work/stdout" "$work/stderr"
        printf '[exit %d]\n\n' "$rc"
    } >>"$log"
    cat "$work/stdout"
}
array() {  # array NAME RANGE 'command' [qsub options...]: submit as alice with -J RANGE, print the id
    local name=$1 range=$2 command=$3
    shift 3
    printf '#!/bin/bash\n#PBS -N %s\n#PBS -l select=1:ncpus=1\n#PBS -l walltime=00:05:00\n#PBS -j oe\n#PBS -o %s/%s.^array_index^.out\n%s\n' \
        "$name" "$work" "$name" "$command" >"$name.sh"
    said qsub -J "$range" -v IRI_GATEWAY_TAG=iri-gateway:capture-"$name" "$@" "$work/$name.sh"
}
sub() { echo "${1/\[\]/[$2]}"; }  # sub ARRAY INDEX-OR-RANGE: 12[].x -> 12[4].x
field() {  # field ARRAY ID NAME: attribute NAME of ID in `qstat -f -F json -x -t ARRAY`
    qstat -f -F json -x -t "$1" | python3 -c '
import json, sys
jobs = json.loads(sys.stdin.read(), strict=False).get("Jobs", {})
print(jobs.get(sys.argv[1], {}).get(sys.argv[2], ""))' "$2" "$3"
}
wait_for() {  # wait_for ARRAY ID STATE
    for _ in $(seq 240); do [ "$(field "$1" "$2" job_state)" = "$3" ] && return 0; sleep 0.5; done
    echo "$2 never reached $3" >&2
    return 1
}
save() {  # save NAME ID...: the document as qstat printed it, PBS_O_PATH shortened
    qstat -f -F json -x -t "${@:2}" \
        | sed -E 's|("PBS_O_PATH":")[^"]*"|\1/usr/local/bin:/usr/bin:/bin"|' >"$out/real-array-$1.json" || true
}
# shellcheck disable=SC2016 # expanded by the job
outcomes='case $PBS_ARRAY_INDEX in 0) exit 0;; 1) exit 3;; 2) kill -KILL $$;; 3) sleep 2;; *) sleep 300;; esac'

queued=$(array queued 0-3 true -q parked)
held=$(array held 0-2 true -h)
throttled=$(array throttled 0-5%2 'sleep 300')
finished=$(array finished 0-3 "$outcomes")
begun=$(array begun 0-4 "$outcomes")
never=$(array never 0-1 true -l select=1:ncpus=99)
stepped=$(array stepped 0-8:2 'sleep 300' -q parked)

wait_for "$queued" "$queued" Q
wait_for "$held" "$held" H
save queued "$queued"
save held "$held"

wait_for "$throttled" "$(sub "$throttled" 0)" R
wait_for "$throttled" "$(sub "$throttled" 1)" R
sleep 5  # two scheduler cycles: a third subjob would have started by now without the throttle
save throttled "$throttled"
said qdel "$(sub "$throttled" 0)" "$(sub "$throttled" 3)" "$(sub "$throttled" 4-5)"
wait_for "$throttled" "$(sub "$throttled" 0)" X
save some-deleted "$throttled"
said qdel "$throttled"
wait_for "$throttled" "$throttled" F
save deleted "$throttled"

wait_for "$finished" "$finished" F
save finished "$finished"
said ls "$work"

for index in 0 1 2 3; do wait_for "$begun" "$(sub "$begun" "$index")" X; done
wait_for "$begun" "$(sub "$begun" 4)" R
save begun "$begun"
said qdel "$(sub "$begun" 0)"              # an ended subjob, alone
said qdel "$(sub "$begun" 1-2)"            # ended subjobs, as a range
wait_for "$begun" "$begun" B
save range-purged "$begun"
said qdel "$begun"
wait_for "$begun" "$begun" F
save whole-deleted "$begun"

said qdel "$(sub "$stepped" 2-6:2)"        # a range with a step
save stepped "$stepped"
said qdel "$(sub "$stepped" 99)"           # outside the array
said qdel "$(sub "$stepped" 1)"            # inside its span, not one of its indices

clipped=$(array clipped 0-9 true -q parked)
said qdel "$(sub "$clipped" 2)" "$(sub "$clipped" 4)" "$(sub "$clipped" 6)"  # three ids of one array
said qdel "$(sub "$clipped" 0,3)"          # a comma
save clipped "$clipped"
{   # what the server received (its log): the qdel client merged the three ids of one array
    echo "# the server's log of the deletions of $clipped:"
    grep -h "${clipped%%\[*}\[" /var/spool/pbs/server_logs/* | grep 'delete job request' | cut -d';' -f5-
    echo
} >>"$log"

for _ in $(seq 20); do qstat -f -F json -x "$never" | grep -q 'Can Never Run' && break; sleep 0.5; done
save never "$never"

save several "$queued" "$finished" "$stepped" 99999.pbshost
for id in "$queued" "$held" "$throttled" "$finished" "$begun" "$never" "$stepped" "$clipped"; do
    qdel -x -W force "$id" 2>/dev/null || true
done
rm -rf "$work"
