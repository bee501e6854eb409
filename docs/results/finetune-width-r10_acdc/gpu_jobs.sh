# Round 10's jobs on a GPU session (amendment 2), for benchmarks/gpu_queue.sh (round 8's finished on the CPU):
#   source benchmarks/offline_setup.sh && bash benchmarks/gpu_queue.sh 480 docs/results/finetune-width-r10_acdc/gpu_jobs.sh
# One job per fold: round 10's command (AMP=False, amendment 1) with the device switches of the GPU fine-tuning
# (recipe batch20_width512_gpu), then its model scored on the fold's validation patients (`bilinear`, one pass).
# Returned: this folder's dice_val.csv, curves_gpu.csv and times_gpu.csv. REHEARSE=1: fold 0, 2 iterations
# validated once, on the CPU.
plan=docs/results/finetune-width-r10_acdc
prefix=r10g_f suffix=_batch20_width512_L2_d0 train=train-r10 recipe=batch20_width512_gpu iterations=1500 val_every=250
labels=(--labeled 2 --draw 0)
overrides=(--batch_size 20 --features "[32,64,128,256,512,32]" --channels_last True --amp False)
val_scorings=('bilinear={"pred_interp": "bilinear"}')
# shellcheck source=benchmarks/gpu_finetune_jobs.sh
source benchmarks/gpu_finetune_jobs.sh
