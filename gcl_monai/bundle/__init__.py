"""What a bundle config calls besides its components: the split file and synthetic dataset it needs
(:mod:`~gcl_monai.bundle.data_setup`), the checks of its switches and of the configs it stacks, and the float32
matrix-product precision (:mod:`~gcl_monai.bundle.run_options`), its device, rank and loader workers
(:mod:`~gcl_monai.bundle.runtime`), its folder (:mod:`~gcl_monai.bundle.locate`), the pre-trained encoder's learning
rate (:mod:`~gcl_monai.bundle.learning_rates`) and the small named steps of a workflow
(:mod:`~gcl_monai.bundle.workflow_steps`)."""

from gcl_monai.bundle.data_setup import check_dataset_dir, ensure_phantom, load_or_create_split
from gcl_monai.bundle.learning_rates import encoder_learning_rate
from gcl_monai.bundle.locate import bundle_folder
from gcl_monai.bundle.run_options import (
    MATMUL_PRECISIONS,
    check_choice,
    check_overlay,
    check_resume,
    check_switches,
    first_enabled,
    if_enabled,
    set_float32_matmul_precision,
    training_loss,
)
from gcl_monai.bundle.runtime import default_device, default_num_workers, memory_format, process_rank
from gcl_monai.bundle.workflow_steps import as_floats, attach_all, every, image_meta, print_summary, release_model

__all__ = [
    "as_floats",
    "bundle_folder",
    "attach_all",
    "every",
    "image_meta",
    "print_summary",
    "release_model",
    "MATMUL_PRECISIONS",
    "check_dataset_dir",
    "check_choice",
    "check_overlay",
    "check_resume",
    "check_switches",
    "default_device",
    "default_num_workers",
    "encoder_learning_rate",
    "ensure_phantom",
    "first_enabled",
    "if_enabled",
    "load_or_create_split",
    "memory_format",
    "process_rank",
    "set_float32_matmul_precision",
    "training_loss",
]
