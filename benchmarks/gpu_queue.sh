#!/usr/bin/env bash
# The fine-tuning rounds' jobs on a time-limited GPU session: each job (one run, then its scorings) of each round
# given, in the order given, SLOTS at a time on the one GPU; what is done packed into $OUT. On the GPU machine, from
# the checkout's root (carry .offline; docs/gpu_run.md, "The plan for time-limited GPU sessions", step 9):
#   source benchmarks/offline_setup.sh && bash benchmarks/gpu_queue.sh SECONDS ROUND_JOBS...
# A ROUND_JOBS file (a round's gpu_jobs.sh, in its folder) is bash, sourced in a subshell for each use; it sets
#   JOBS=(...)                  the round's job names, unique across rounds, in the order they should run
# and defines
#   job_run NAME                the run (resumable from its checkpoints) and its scorings, each step only after the
#                               one before succeeded; it fails when a step does
#   job_committed NAME          true when the job's rows are in the tracked files (scored in an earlier session)
#   job_pack ROWS LOGS NAME...  writes the round's returned files under ROWS, at their paths in the checkout (the
#                               tracked files with this session's jobs NAME... added), and the jobs' logs under LOGS
# with DATA (the data root), WORK (this queue's work folder) and REHEARSE set (1: a short run on the CPU, rows
# discarded); job_pack may use pack_training and pack_scores (below). Each call starts, in order, the jobs neither
# started nor committed, and again those that failed in an earlier call (they resume from their last checkpoints while
# the machine is held); it waits until every job has ended or SECONDS have passed, starting the next job as one ends;
# then it packs the rows of every job scored on this machine into $OUT/rows.tar.gz (extract it over the checkout: tar
# -xzf rows.tar.gz) and the logs into $OUT/logs.tar.gz, prints each job's state (no Dice) and exits 0 when every job is
# scored, 2 when work is left (call again at once: the jobs run on between calls, and a machine that goes back takes the
# unfinished ones with it; a round whose packing fails returns none of its files and the call exits 2).
set -euo pipefail
WAIT="${1:?usage: gpu_queue.sh SECONDS ROUND_JOBS...}"
shift
[ $# -gt 0 ] || { echo "usage: gpu_queue.sh SECONDS ROUND_JOBS..." >&2; exit 1; }
OUT="${OUT:?the folder whose files come back}"
DATA="${GCL_DATA_ROOT:?source benchmarks/offline_setup.sh first (it sets GCL_DATA_ROOT)}"
WORK="${WORK:-/tmp/gpu-queue}"
SLOTS="${SLOTS:-5}"
REHEARSE="${REHEARSE:-0}"
export DATA WORK REHEARSE
jobs_dir="$WORK/jobs"
mkdir -p "$jobs_dir" "$OUT"

in_round() {  # in_round ROUND_JOBS COMMAND...: the command with the round's definitions, in a subshell
    local round="$1"
    shift
    (
        set -euo pipefail
        # shellcheck disable=SC1090
        source "$round"
        "$@"
    )
}

list_jobs() { printf '%s\n' "${JOBS[@]}"; }

append() {  # append CSV TARGET: the rows of CSV, with its header only where TARGET is new
    if [ -f "$2" ]; then tail -n +2 "$1" >> "$2"; else cp "$1" "$2"; fi
}

pack_training() {  # pack_training PLAN ROWS LOGS TRAIN...: under ROWS/PLAN, curves_gpu.csv and times_gpu.csv (the
    # committed rows, then those of each finetune_curves --out folder TRAIN under $WORK); each run's log under LOGS
    local plan="$1" rows="$2" logs="$3" train file
    shift 3
    mkdir -p "$rows/$plan"
    for file in curves_gpu.csv times_gpu.csv; do
        if [ -f "$plan/$file" ]; then cp "$plan/$file" "$rows/$plan/$file"; fi
    done
    for train in "$@"; do
        python3 -m benchmarks.finetune_curves times "$train"
        append "$train/curves.csv" "$rows/$plan/curves_gpu.csv"
        append "$train/times.csv" "$rows/$plan/times_gpu.csv"
        (cd "$WORK" && cp --parents "${train#"$WORK"/}"/runs/*/log.txt "${train#"$WORK"/}"/runs/*/command.json "$logs/")
    done
}

pack_scores() {  # pack_scores ROWS LOGS DICE_CSV...: each Dice file (a plan's, in the checkout) under ROWS at its
    # path, and its plan's evaluation logs under LOGS
    local rows="$1" logs="$2" file evals
    shift 2
    for file in "$@"; do
        mkdir -p "$rows/$(dirname "$file")"
        cp "$file" "$rows/$file"
        mapfile -t evals < <(ls -d "$(dirname "$file")"/runs/*/eval.log 2> /dev/null)
        if [ ${#evals[@]} -gt 0 ]; then cp --parents "${evals[@]}" "$logs/"; fi
    done
}
names=() round_of=()
for round in "$@"; do
    [ -f "$round" ] || { echo "gpu_queue: $round is not a file" >&2; exit 1; }
    mapfile -t listed < <(in_round "$round" list_jobs)
    [ ${#listed[@]} -gt 0 ] || { echo "gpu_queue: $round lists no JOBS" >&2; exit 1; }
    for name in "${listed[@]}"; do
        for known in "${names[@]}"; do
            [ "$known" != "$name" ] || { echo "gpu_queue: job $name is listed twice" >&2; exit 1; }
        done
        names+=("$name")
        round_of+=("$round")
    done
done

state() {  # state JOB: scored, failed, running or waiting
    if [ -f "$jobs_dir/$1.scored" ]; then echo scored
    elif [ -f "$jobs_dir/$1.failed" ]; then echo failed
    elif [ -f "$jobs_dir/$1.started" ]; then echo running
    else echo waiting; fi
}

for i in "${!names[@]}"; do  # a job scored in an earlier session (its rows committed) is not run again
    name="${names[$i]}"
    if [ ! -f "$jobs_dir/$name.started" ] && in_round "${round_of[$i]}" job_committed "$name"; then
        touch "$jobs_dir/$name.started" "$jobs_dir/$name.earlier" "$jobs_dir/$name.scored"
        echo "$name: scored in an earlier session"
    fi
    if [ -f "$jobs_dir/$name.failed" ]; then  # failed in an earlier call: it may start again (once in this call)
        rm -f "$jobs_dir/$name.failed" "$jobs_dir/$name.started"
    fi
done

start_next() {  # starts waiting jobs, in order, while fewer than SLOTS run
    local i running=0 name
    for name in "${names[@]}"; do [ "$(state "$name")" != running ] || running=$((running + 1)); done
    for i in "${!names[@]}"; do
        [ "$running" -lt "$SLOTS" ] || return 0
        name="${names[$i]}"
        [ "$(state "$name")" = waiting ] || continue
        touch "$jobs_dir/$name.started"
        setsid bash -c "$(declare -f in_round); in_round '${round_of[$i]}' job_run '$name' &&
            touch '$jobs_dir/$name.scored' || touch '$jobs_dir/$name.failed'" \
            >> "$jobs_dir/$name.log" 2>&1 < /dev/null &
        echo "$name: started ($(date -u +%FT%TZ))"
        running=$((running + 1))
    done
}

unfinished() {  # the number of jobs waiting or running
    local n=0 name
    for name in "${names[@]}"; do
        case "$(state "$name")" in waiting | running) n=$((n + 1)) ;; esac
    done
    echo "$n"
}

deadline=$((SECONDS + WAIT))
start_next
while [ "$(unfinished)" -gt 0 ] && [ $SECONDS -lt $deadline ]; do
    sleep 2
    start_next
done

rows="$WORK/pack/rows" logs="$WORK/pack/logs" pack_failed=0
rm -rf "$WORK/pack"
mkdir -p "$rows" "$logs"
cp -r "$jobs_dir" "$logs/jobs"
for round in "$@"; do  # each round's jobs scored on this machine (an earlier session's rows are in the checkout)
    scored=()
    for i in "${!names[@]}"; do
        name="${names[$i]}"
        [ "${round_of[$i]}" = "$round" ] && [ "$(state "$name")" = scored ] || continue
        [ -f "$jobs_dir/$name.earlier" ] || scored+=("$name")
    done
    [ ${#scored[@]} -gt 0 ] || continue
    # each round packed apart and kept only whole: a round whose packing fails returns nothing (its jobs are packed
    # again by the next call), and the other rounds' rows still come back
    stage="$WORK/pack/stage"
    rm -rf "$stage"
    mkdir -p "$stage"
    pack_log="$logs/jobs/pack-$(basename "$(dirname "$round")").log"
    set +e  # not an `if` condition, where bash would ignore `set -e` in the round's job_pack
    in_round "$round" job_pack "$stage" "$logs" "${scored[@]}" > "$pack_log" 2>&1
    packed=$?
    set -e
    if [ "$packed" = 0 ]; then
        cp -r "$stage/." "$rows/"
    else
        echo "$round: packing failed, its rows not returned (logs.tar.gz: jobs/pack-*.log); call again"
        pack_failed=1
    fi
done
rm -rf "$WORK/pack/stage"
rm -f "$OUT/rows.tar.gz"
if [ -n "$(ls -A "$rows")" ]; then tar -czf "$OUT/rows.tar.gz" -C "$rows" .; fi
tar -czf "$OUT/logs.tar.gz" -C "$logs" .
left=0
for name in "${names[@]}"; do
    echo "$name: $(state "$name")"
    [ "$(state "$name")" = scored ] || left=$((left + 1))
done
ls -l "$OUT"
[ "$left" -eq 0 ] && [ "$pack_failed" = 0 ] || exit 2
