#!/usr/bin/env bash
# The precision of a round's runs (sourced by the round's run.sh): AMP=True (bfloat16 autocast, the bundle's
# --amp True) or AMP=False (float32), as issue 53's round 9 chose, written in the round's plan before its runs.
# `amp_recipe NAME` prints the recipe's name in that precision (NAME_bf16 with bfloat16) and refuses any other AMP.
amp_recipe() {
    case "${AMP:-}" in
        True) echo "${1}_bf16" ;;
        False) echo "$1" ;;
        *)
            echo "AMP must be True or False (the precision round 9 chose, written in the plan before the runs), got '${AMP:-}'" >&2
            return 2
            ;;
    esac
}
