# Round 8's jobs on a GPU session (amendments 4 and 6), for benchmarks/gpu_queue.sh:
#   source benchmarks/offline_setup.sh && bash benchmarks/gpu_queue.sh 480 docs/results/finetune-curves-r8_acdc/gpu_jobs.sh
# One job per fold of the 192 x 192 arm: round 8's command with the device switches of the GPU fine-tuning (recipe
# batch20_grid192_gpu), then its model scored on the fold's validation patients under the plan's three scorings and,
# sealed, on the test patients under the gate's two. Returned: this folder's dice_val.csv, curves_gpu.csv and
# times_gpu.csv, the gate's dice_test.csv. REHEARSE=1: fold 0, 2 iterations validated once, on the CPU.
plan=docs/results/finetune-curves-r8_acdc
gate=docs/results/gate-fullsup_acdc
prefix=r8g_f suffix=_batch20_grid192 train=train recipe=batch20_grid192_gpu iterations=2500 val_every=500
labels=(--labeled full)
overrides=(--batch_size 20 --image_size "[192,192]" --channels_last True)
fullsup='fullsup={"pred_interp": "bilinear", "mirror_axes": [0, 1]}'
nearest='nearest={"pred_interp": "nearest"}'
val_scorings=("$fullsup" "$nearest" 'bilinear={"pred_interp": "bilinear"}')
test_scorings=("$fullsup" "$nearest")
# shellcheck source=benchmarks/gpu_finetune_jobs.sh
source benchmarks/gpu_finetune_jobs.sh
