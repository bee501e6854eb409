#!/usr/bin/env bash
# The network's width of a round's runs (sourced by the round's run.sh): WIDTH=default (the bundles' features
# 16 .. 256) or WIDTH=paper (the paper's 32 .. 512), as issue 53's round 10 chose, written in the round's plan
# before its runs. `width_features` prints the bundle's --features and `width_recipe NAME` the recipe's name in that
# width (NAME_width512 at the paper's); both refuse any other WIDTH.
_width_check() {
    case "${WIDTH:-}" in
        default | paper) return 0 ;;
        *)
            echo "WIDTH must be default or paper (round 10's choice, written in the plan before the runs), got '${WIDTH:-}'" >&2
            return 2
            ;;
    esac
}
width_features() {
    _width_check || return 2
    if [ "$WIDTH" = paper ]; then echo "[32,64,128,256,512,32]"; else echo "[16,32,64,128,256,16]"; fi
}
width_recipe() {
    _width_check || return 2
    if [ "$WIDTH" = paper ]; then echo "${1}_width512"; else echo "$1"; fi
}
