#!/usr/bin/env bash
# docs/protocol.md, stages B and C on ACDC as amended (amendment 3: L = 2 first; amendment 5: stage C at the primary
# L only), then the assembled experiment and its pre-registered analysis. Resumable: rerun the same command; finished
# cells are skipped.
#   RECIPE="--pretrain-set pixel_weight=0.1" JOBS=2 bash docs/results/protocol_acdc/run.sh [DATA_ROOT] [RESULTS_DIR]
# RECIPE: GCL's recipe as stage A chose it (docs/protocol.md, the amendment that commits it); "default" for the
# bundles' default; unset: stop after stage B (stage C waits for stage A's choice).
set -eu
ROOT=${1:-${GCL_DATA_ROOT:-../shared/data}}
RESULTS=${2:-results}
B="python -m gcl_monai.benchmark --preset cpu-protocol --data acdc --data-root $ROOT --results-dir $RESULTS --jobs ${JOBS:-2}"
A="python -m gcl_monai.benchmark protocol --results-dir $RESULTS"
CONTROL="--methods random supervised_encoder --pretrain-seeds 0 1"
registration() {  # L: the registered comparisons when L is primary
  if [ "$1" = 2 ]; then echo protocol; else echo protocol-L1; fi
}
stage_b() {  # L [reuse flags]: stage B at L, then its analysis on the validation rows
  local l=$1; shift
  $B $CONTROL --num-labeled "$l" --name "protocol-stageB-L${l}_acdc" "$@"
  $A --name "protocol-stageB-L${l}_acdc" --test-set val --registration "$(registration "$l")" > /dev/null
}
control_resolved() {  # L: the control's lift over random at L has a seed-aware interval above 0 (stage B's rule)
  python - "$RESULTS/protocol-stageB-L$1_acdc/protocol_analysis_val.csv" "$1" <<'PY'
import csv, sys
path, l = sys.argv[1:]
row = next(r for r in csv.DictReader(open(path)) if (r["method"], r["num_labeled"]) == ("supervised_encoder", l))
sys.exit(0 if row["missing"] == "" and float(row["low"]) > 0 else 1)
PY
}
stage_b 2
if control_resolved 2; then
  primary=2
else
  stage_b 1 --pretrain-from protocol-stageB-L2_acdc
  control_resolved 1 || { echo "Stage B: the control is resolved at neither L; the protocol stops here."; exit 0; }
  primary=1
fi
[ -n "${RECIPE:-}" ] || { echo "Stage B done (primary L = $primary). Stage C needs RECIPE (stage A's choice)."; exit 0; }
[ "$RECIPE" = default ] && RECIPE=""
# stage C at the primary L, taking stage B's cells over; then the assembled experiment and the registered analysis
C="protocol-stageC-L${primary}_acdc"
$B --num-labeled "$primary" --name "$C" $RECIPE --pretrain-from protocol-stageB-L2_acdc \
  --finetune-from "protocol-stageB-L${primary}_acdc"
$A --name "$C" --registration "$(registration "$primary")"
$B --num-labeled "$primary" --name cpu-protocol_acdc $RECIPE --pretrain-from "$C" --finetune-from "$C"
$A --name cpu-protocol_acdc --registration "$(registration "$primary")"
