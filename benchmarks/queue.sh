#!/usr/bin/env bash
# A work queue shared by the streams of a round (sourced by the round's run.sh). The round defines `job INDEX` (one
# run, resumable) and sets OUT; `run_queue STREAM COUNT` then runs, in index order, each job 0 .. COUNT-1 that is
# neither finished nor claimed by a live stream. A claim is the folder $OUT/runs/claims/<INDEX> holding the
# claiming stream's process id; a finished job leaves `done` in it. A claim is made whole and then renamed into place
# (rename is atomic and refuses a folder that exists), so it never lacks its process id and two streams never hold
# one job. A dead stream's claim is taken over unless its job finished: the dead claim is renamed aside first, so
# only one stream takes it; a stopped round restarts with the same command. A round may also define `score_job INDEX`:
# it runs after `job INDEX` under the same claim, before `done`, so that a run is scored (its rows written) as soon as
# it has trained, in the session and on the machine that hold its model; a stream stopped between the two runs both
# again on the next call (the job skips a finished run, the scoring what it has scored).
claim_job() {
    local dir="$OUT/runs/claims/$1" new owner
    mkdir -p "$OUT/runs/claims"
    new=$(mktemp -d "$OUT/runs/claims/.new-$1-XXXXXX")
    echo $$ > "$new/pid"
    if mv -T "$new" "$dir" 2>/dev/null; then return 0; fi
    rm -rf "$new"
    owner=$(cat "$dir/pid" 2>/dev/null || true)
    if [ -n "$owner" ] && kill -0 "$owner" 2>/dev/null; then return 1; fi
    # the owner is gone; it leaves `done` before it ends, so a finished job is seen here
    if [ -f "$dir/done" ]; then return 1; fi
    if ! mv -T "$dir" "$OUT/runs/claims/.dead-$1-$$" 2>/dev/null; then return 1; fi  # another stream took it over
    rm -rf "$OUT/runs/claims/.dead-$1-$$"
    claim_job "$1"
}
run_queue() {
    local stream="$1" count="$2" index
    for ((index = 0; index < count; index++)); do
        if [ -f "$OUT/runs/claims/$index/done" ]; then continue; fi
        claim_job "$index" || continue
        echo "stream $stream: job $index ($(date -u +%FT%TZ))"
        job "$index"
        if declare -F score_job > /dev/null; then score_job "$index"; fi
        touch "$OUT/runs/claims/$index/done"
    done
}
