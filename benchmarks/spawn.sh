# Sourced by the protocol's drivers (benchmarks/protocol_stage_a.sh, benchmarks/probe_test.sh):
# `spawn COMMAND...` runs COMMAND in the background once fewer than JOBS (default 1) of the caller's runs are going,
# in the foreground when JOBS is 1; the caller waits for them with `wait`. Give each run one thread
# (OMP_NUM_THREADS=1) on a CPU of JOBS cores.
JOBS=${JOBS:-1}
spawn() {
  if [ "$JOBS" -le 1 ]; then
    "$@"
    return
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  "$@" &
}
