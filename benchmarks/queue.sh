#!/usr/bin/env bash
# A work queue shared by the streams of a round (sourced by the round's run.sh). The round defines `job INDEX` (one
# run, resumable) and sets OUT; `run_queue STREAM COUNT` then runs, in index order, each job 0 .. COUNT-1 that is
# neither finished nor claimed by a live stream. A claim is the folder $OUT/runs/claims/<INDEX> holding the
# claiming stream's process id (mkdir is atomic, so two streams never claim one job); a dead stream's claim is taken
# over, so a stopped round restarts with the same command. A finished job leaves `done` in its claim.
claim_job() {
    local dir="$OUT/runs/claims/$1" owner
    mkdir -p "$OUT/runs/claims"
    if mkdir "$dir" 2>/dev/null; then echo $$ > "$dir/pid"; return 0; fi
    for _ in 1 2 3 4 5 6 7 8 9 10; do  # a claim just made may not hold its process id yet
        owner=$(cat "$dir/pid" 2>/dev/null || true)
        if [ -n "$owner" ]; then break; fi
        sleep 0.1
    done
    if [ -n "$owner" ] && [ "$owner" != $$ ] && kill -0 "$owner" 2>/dev/null; then return 1; fi
    echo $$ > "$dir/pid"
}
run_queue() {
    local stream="$1" count="$2" index
    for ((index = 0; index < count; index++)); do
        if [ -f "$OUT/runs/claims/$index/done" ]; then continue; fi
        claim_job "$index" || continue
        echo "stream $stream: job $index ($(date -u +%FT%TZ))"
        job "$index"
        touch "$OUT/runs/claims/$index/done"
    done
}
