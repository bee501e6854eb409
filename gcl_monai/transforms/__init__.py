"""MONAI transforms of gcl-monai: HDF5 reading, volume -> 2D slices with meta labels, contrastive views, presets."""

from gcl_monai.transforms.batch_augmentation import BatchSliceAugmentation
from gcl_monai.transforms.batch_views import BatchContrastiveViews
from gcl_monai.transforms.dicom_reader import PositionSortedPydicomReader
from gcl_monai.transforms.dicom_seg import SaveDicomSegd, label_map_on_source, write_dicom_seg
from gcl_monai.transforms.field_of_view import FOV_SHAPES, CenterSquareCrop, CenterSquareCropd, field_of_view_crop
from gcl_monai.transforms.grid import GRIDS, RequireSpacingd, in_plane_grid
from gcl_monai.transforms.h5_reader import H5Reader
from gcl_monai.transforms.inference_checks import FRAME_KEY, RepairNonFinited, SelectFramed
from gcl_monai.transforms.postprocessing import LARGEST_COMPONENT_MODES, keep_largest_component
from gcl_monai.transforms.presets import (
    DICE_GRIDS,
    PRED_INTERPS,
    SelectChanneld,
    dice_grid_steps,
    eval_transforms,
    finetune_transforms,
    pretrain_transforms,
    volume_eval_transforms,
    volume_transforms,
)
from gcl_monai.transforms.slicing import SLICE_INDEX_KEY, SLICE_QUANTILE_KEY, VolumeToSlicesd, slice_quantiles
from gcl_monai.transforms.view_strengths import ViewStrengths
from gcl_monai.transforms.views import ContrastiveViewsd, RandRelativeGaussianNoised
from gcl_monai.transforms.volume_loading import LoadVolumed

__all__ = [
    "PositionSortedPydicomReader",
    "SaveDicomSegd",
    "label_map_on_source",
    "write_dicom_seg",
    "FRAME_KEY",
    "RepairNonFinited",
    "SelectFramed",
    "FOV_SHAPES",
    "CenterSquareCrop",
    "CenterSquareCropd",
    "field_of_view_crop",
    "GRIDS",
    "RequireSpacingd",
    "in_plane_grid",
    "H5Reader",
    "LoadVolumed",
    "VolumeToSlicesd",
    "slice_quantiles",
    "SLICE_QUANTILE_KEY",
    "SLICE_INDEX_KEY",
    "ContrastiveViewsd",
    "BatchContrastiveViews",
    "BatchSliceAugmentation",
    "ViewStrengths",
    "RandRelativeGaussianNoised",
    "SelectChanneld",
    "LARGEST_COMPONENT_MODES",
    "keep_largest_component",
    "DICE_GRIDS",
    "PRED_INTERPS",
    "dice_grid_steps",
    "volume_transforms",
    "volume_eval_transforms",
    "pretrain_transforms",
    "finetune_transforms",
    "eval_transforms",
]
