"""The shape and place of each label of the prostate masks (gate README, "A finding about the zone names"): per case,
the voxels of labels 1 and 2, their centroids along the P axis (the masks are L-P-S) and the median solidity of
each label's largest region over the axial slices with more than 200 of its voxels. Run from the repository root:
``python docs/results/gate-fullsup_prostate/zone_shape.py ../shared/data/prostate/masks``; writes zone_shape.csv here.
"""

import csv
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
from skimage.measure import label, regionprops


def median_solidity(mask: np.ndarray) -> float:
    slices = (mask[..., z] for z in range(mask.shape[2]))
    return float(
        np.median([max(regionprops(label(s)), key=lambda r: r.area).solidity for s in slices if s.sum() > 200])
    )


def main(masks: Path) -> Path:
    target = Path(__file__).with_name("zone_shape.csv")
    with target.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["case", "voxels_1", "voxels_2", "p_centroid_1", "p_centroid_2", "solidity_1", "solidity_2"])
        for path in sorted(masks.glob("*.nii.gz")):
            image = nib.load(path)
            if nib.aff2axcodes(image.affine)[1] != "P":
                raise SystemExit(f"{path}: second axis is not P ({nib.aff2axcodes(image.affine)})")
            mask = np.asarray(image.dataobj)
            ones, twos = mask == 1, mask == 2
            writer.writerow(
                [path.name.split("_")[0], int(ones.sum()), int(twos.sum())]
                + [round(float(np.argwhere(m)[:, 1].mean()), 1) for m in (ones, twos)]
                + [round(median_solidity(m), 3) for m in (ones, twos)]
            )
    return target


if __name__ == "__main__":
    print(main(Path(sys.argv[1])))
