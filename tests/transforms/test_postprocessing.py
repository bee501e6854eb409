"""keep_largest_component: the bundles' connected-component clean-up, checked on a hand-built label map."""

import numpy as np
import pytest
import torch

from gcl_monai.transforms import LARGEST_COMPONENT_MODES, keep_largest_component


def _label_map() -> torch.Tensor:
    """(1, 8, 8, 2): class 1 a 2 x 2 x 2 block (8 voxels) plus a detached voxel; class 2 a 2-voxel strip touching
    the block, and a detached 3-voxel strip (larger than the touching one)."""
    lab = torch.zeros(1, 8, 8, 2, dtype=torch.int64)
    lab[0, 1:3, 1:3, :] = 1
    lab[0, 6, 6, 0] = 1  # class 1 island, 1 voxel
    lab[0, 3, 1:3, 0] = 2  # class 2 touching class 1, 2 voxels
    lab[0, 5:8, 4, 1] = 2  # class 2 island, 3 voxels
    return lab


def test_each_class_keeps_its_own_largest_component():
    out = keep_largest_component("class", num_classes=3)({"pred": _label_map()})["pred"]
    expected = _label_map()
    expected[0, 6, 6, 0] = 0  # class 1: the island goes
    expected[0, 3, 1:3, 0] = 0  # class 2: its largest component is the 3-voxel island, the touching strip goes
    np.testing.assert_array_equal(np.asarray(out), np.asarray(expected))


def test_foreground_keeps_the_largest_component_of_all_classes_together():
    out = keep_largest_component("foreground", num_classes=3)({"pred": _label_map()})["pred"]
    expected = _label_map()
    expected[0, 6, 6, 0] = 0  # both islands go; the touching class-2 strip is part of the 10-voxel component
    expected[0, 5:8, 4, 1] = 0
    np.testing.assert_array_equal(np.asarray(out), np.asarray(expected))


def test_components_connect_across_slices():
    lab = torch.zeros(1, 4, 4, 3, dtype=torch.int64)
    lab[0, 0, 0, 0] = lab[0, 0, 0, 1] = lab[0, 0, 0, 2] = 1  # 3 voxels along the slice axis
    lab[0, 3, 3, 0] = lab[0, 3, 2, 0] = 1  # 2 voxels in one slice
    out = keep_largest_component("class", num_classes=2)({"pred": lab})["pred"]
    assert int(out.sum()) == 3 and int(out[0, 0, 0].sum()) == 3


def test_off_is_the_identity_and_bad_values_are_refused():
    lab = _label_map()
    for off in (None, False):
        assert torch.equal(keep_largest_component(off, num_classes=3)({"pred": lab})["pred"], lab)
    assert LARGEST_COMPONENT_MODES == ("class", "foreground")
    with pytest.raises(ValueError, match="keep_largest_component must be False, None or one of .* got 'per_class'"):
        keep_largest_component("per_class", num_classes=3)
    with pytest.raises(ValueError, match="got True"):
        keep_largest_component(True, num_classes=3)
    with pytest.raises(ValueError, match="num_classes=1"):
        keep_largest_component("class", num_classes=1)
