# Round 11's jobs on a GPU session (amendment 1), for benchmarks/gpu_queue.sh, first (docs/gpu_run.md,
# step 9: then the random gates' and round 10's).
# One job per fold: round 11's command (AMP=False, amendment 1) with the device switches of the GPU fine-tuning
# (recipe batch20_grid192_it5000_gpu), then its model scored on the fold's validation patients (`fullsup`,
# `bilinear`) and, sealed, on the test patients into the full-supervision gate's folder (`fullsup`, `nearest`).
# Returned: this folder's dice_val.csv, curves_gpu.csv and times_gpu.csv, the gate's dice_test.csv. REHEARSE=1:
# fold 0, 2 iterations validated once, on the CPU.
plan=docs/results/finetune-budget-r11_acdc
gate=docs/results/gate-fullsup_acdc
prefix=r11g_f suffix=_batch20_grid192_it5000 train=train-r11 recipe=batch20_grid192_it5000_gpu iterations=5000
val_every=500
labels=(--labeled full)
overrides=(--batch_size 20 --image_size "[192,192]" --channels_last True --amp False)
fullsup='fullsup={"pred_interp": "bilinear", "mirror_axes": [0, 1]}'
val_scorings=("$fullsup" 'bilinear={"pred_interp": "bilinear"}')
test_scorings=("$fullsup" 'nearest={"pred_interp": "nearest"}')
# shellcheck source=benchmarks/gpu_finetune_jobs.sh
source benchmarks/gpu_finetune_jobs.sh
