"""``python -m experiments.gpu_session``: the resumable run of the GPU comparison in time-limited GPU sessions
(docs/gpu_run.md)."""

import sys

from experiments.gpu_session.cli import main_gpu_run

if __name__ == "__main__":
    sys.exit(main_gpu_run(sys.argv[1:]))
