"""Synthetic short-axis cine cardiac MRI in the official ACDC layout: the project's embedded dataset.

Each patient gets an end-diastole (ED, frame 1) and an end-systole (ES) frame of 8-12 short-axis
slices from base to apex, labelled like ACDC (1 RV cavity, 2 LV myocardium, 3 LV cavity), with an
``Info.cfg``. The anatomy varies

- by patient: pathology group (DCM, HCM, MINF, NOR, RV, in blocks like ACDC), heart size, shape,
  position, rotation, wall thickness, tissue intensities, noise, blur and bias field;
- by phase: at ES the LV cavity and the RV shrink and the myocardium thickens (its area is kept),
  and the base descends (through-plane motion);
- by slice position: structures shrink towards the apex, the RV ends before the apex, the liver
  appears in apical slices and the lungs shrink,

so the ``slice_quantile`` and ``organ_state`` meta labels carry real information. The background
(body with fat and muscle layers, dark lungs, liver, descending aorta, epicardial fat) shares
intensities with the heart, so segmentation is not a threshold.

Example::

    python -m gcl_monai.data.phantom --out /tmp/phantom --num-patients 20 --seed 0
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gcl_monai.data.acdc import ACDC_GROUPS

logger = logging.getLogger("gcl_monai.data")

SLICE_THICKNESS_MM = 10.0

# tissue classes of the intensity model
AIR, SOFT, FAT, MUSCLE, LUNG, LIVER, AORTA, BONE, RV_WALL, MYO, LV_BLOOD, RV_BLOOD, PAPILLARY = range(13)
_NUM_TISSUES = 13

# relative amplitude of the fine (~1 px) and coarse (~3 px) texture of each tissue class
_TEXTURE = np.zeros((2, _NUM_TISSUES))
_TEXTURE[0, [SOFT, FAT, MUSCLE, LUNG, LIVER, BONE, MYO, RV_WALL]] = [0.12, 0.08, 0.15, 0.6, 0.06, 0.3, 0.05, 0.05]
_TEXTURE[1, [SOFT, FAT, MUSCLE, LUNG, LIVER, LV_BLOOD, RV_BLOOD, AORTA]] = [
    0.1,
    0.08,
    0.08,
    0.5,
    0.08,
    0.05,
    0.07,
    0.05,
]

# per-group ranges: ED basal LV radius (mm), wall thickness (mm), ES/ED LV radius ratio,
# RV crescent width (mm), ES/ED RV width ratio
_GROUP_RANGES = {
    "DCM": {"r_lv": (29, 35), "wall": (5.5, 7.5), "lv_es": (0.84, 0.92), "rv": (11, 17), "rv_es": (0.72, 0.88)},
    "HCM": {"r_lv": (18, 23), "wall": (12, 16), "lv_es": (0.42, 0.56), "rv": (10, 15), "rv_es": (0.55, 0.7)},
    "MINF": {"r_lv": (26, 31), "wall": (6, 8.5), "lv_es": (0.76, 0.88), "rv": (11, 17), "rv_es": (0.62, 0.78)},
    "NOR": {"r_lv": (21, 26), "wall": (7, 10), "lv_es": (0.58, 0.7), "rv": (13, 19), "rv_es": (0.55, 0.7)},
    "RV": {"r_lv": (19, 24), "wall": (7, 9), "lv_es": (0.6, 0.72), "rv": (22, 30), "rv_es": (0.78, 0.92)},
}


@dataclass
class _Patient:
    """Random parameters of one synthetic patient (lengths in mm, angles in radians)."""

    group: str
    spacing: float
    num_slices: int
    es_frame: int
    num_frames: int
    height: float
    weight: float
    center: np.ndarray  # heart (LV) centre at the base
    drift: np.ndarray  # centre shift from base to apex
    lv_radius: float
    lv_ecc: float
    lv_angle: float
    twist: float
    harmonics: np.ndarray  # (k, amplitude, phase) rows of the LV boundary
    wall: float
    wall_var: float
    wall_angle: float
    thin_angle: float | None  # MINF: angle of a thinned (infarcted) wall segment
    apex: float
    lv_es: float
    rv_width: float
    rv_es: float
    rv_angle: float
    rv_span: float
    rv_extent: float
    rv_wall: float
    papillary_angles: tuple[float, float]
    papillary_radius: float
    epi_fat: np.ndarray  # (k, amplitude, phase) rows of the epicardial fat thickness
    base_shift: float  # through-plane descent of the base at ES, in units of the stack length
    skin_gap: float
    body_axes: tuple[float, float]
    body_dx: float
    fat_layer: float
    muscle_layer: float
    lungs: tuple[tuple[float, float, float, float, float], ...]  # (dx, dy, ax, ay, angle)
    lung_shape: np.ndarray  # (lung, k, amplitude, phase) boundary harmonics
    liver: tuple[float, float, float, float, float]  # (dx, dy, ax, ay, start)
    aorta: tuple[float, float, float]  # (dx, dy, radius)
    spine: tuple[float, float, float]
    intensity: np.ndarray  # per tissue class
    noise: float
    blur: float
    bias: tuple[float, float, float]
    gain: float


def _sample_patient(rng: np.random.Generator, group: str, image_size: tuple[int, int]) -> _Patient:
    ranges = _GROUP_RANGES[group]
    u = rng.uniform
    es_frame = int(rng.integers(8, 15))
    blood, myo = u(0.85, 1.0), u(0.17, 0.28)  # bSSFP: bright blood, dark myocardium
    levels = {
        SOFT: u(0.3, 0.42),
        FAT: u(0.72, 0.95),
        MUSCLE: myo * u(1.0, 1.3),
        LUNG: u(0.02, 0.06),
        LIVER: u(0.3, 0.45),
        BONE: u(0.12, 0.2),
        AORTA: blood * u(0.8, 1.0),
        RV_WALL: myo * u(0.95, 1.2),
        MYO: myo,
        LV_BLOOD: blood,
        RV_BLOOD: blood * u(0.9, 1.05),
        PAPILLARY: myo * u(1.0, 1.2),
    }
    intensity = np.zeros(_NUM_TISSUES)
    intensity[list(levels)] = list(levels.values())
    rv_angle = np.pi + u(-0.15, 0.45)  # image left and slightly up (anterior)
    fov = min(image_size) * 1.5  # nominal field of view (mm), keeps the heart inside small images
    return _Patient(
        group=group,
        spacing=u(1.35, 1.7),
        num_slices=int(rng.integers(8, 13)),
        es_frame=es_frame,
        num_frames=int(rng.integers(max(25, es_frame + 10), 36)),
        height=round(u(150, 195), 1),
        weight=round(u(50, 110), 1),
        center=np.array([u(-0.06, 0.06), u(-0.06, 0.06)]) * fov + np.array([4.0, 0.0]),
        drift=rng.normal(0, 3.0, 2),
        lv_radius=u(*ranges["r_lv"]),
        lv_ecc=u(0.0, 0.12),
        lv_angle=u(0, np.pi),
        twist=u(-0.25, 0.25),
        harmonics=np.stack([np.arange(2, 5), rng.normal(0, 0.025, 3), u(0, 2 * np.pi, 3)], axis=1),
        wall=u(*ranges["wall"]),
        wall_var=u(0.05, 0.2),
        wall_angle=u(0, 2 * np.pi),
        thin_angle=float(u(0, 2 * np.pi)) if group == "MINF" else None,
        apex=u(0.86, 0.98),
        lv_es=u(*ranges["lv_es"]),
        rv_width=u(*ranges["rv"]),
        rv_es=u(*ranges["rv_es"]),
        rv_angle=rv_angle,
        rv_span=u(1.45, 1.85) if group == "RV" else u(1.1, 1.5),
        rv_extent=u(0.6, 0.82),
        rv_wall=u(2.5, 4.0),
        papillary_angles=(rv_angle + np.pi - u(0.5, 0.9), rv_angle + np.pi + u(0.5, 0.9)),
        papillary_radius=u(2.5, 4.0),
        epi_fat=np.stack([np.arange(1, 4), u(0.5, 2.5, 3), u(0, 2 * np.pi, 3)], axis=1),
        base_shift=u(0.04, 0.1),
        skin_gap=u(62, 85),
        body_axes=(u(150, 185), u(105, 130)),
        body_dx=u(-15, 15),
        fat_layer=u(5, 15),
        muscle_layer=u(6, 12),
        lungs=(
            (-u(48, 60), u(5, 20), u(34, 44), u(60, 75), u(-0.3, 0.3)),
            (u(46, 58), u(15, 30), u(30, 40), u(55, 70), u(-0.3, 0.3)),
        ),
        lung_shape=np.stack(
            [np.stack([np.arange(1, 5), rng.normal(0, 0.06, 4), u(0, 2 * np.pi, 4)], axis=1) for _ in range(2)]
        ),
        liver=(-u(25, 45), u(55, 75), u(60, 80), u(40, 55), u(0.3, 0.6)),
        aorta=(u(10, 28), u(50, 62), u(9, 12)),
        spine=(u(-5, 10), u(82, 95), u(14, 18)),
        intensity=intensity,
        noise=u(0.015, 0.05),
        blur=u(0.5, 0.9),
        bias=(u(-0.35, -0.1), u(-0.15, 0.15), u(0.05, 0.15)),
        gain=u(400, 1200),
    )


def _smooth_noise(rng: np.random.Generator, shape: tuple[int, int], sigma: float) -> np.ndarray:
    """Zero-mean, unit-std Gaussian-correlated noise (correlation length ``sigma`` pixels)."""
    field = _gaussian_blur(rng.standard_normal(shape), sigma)
    return (field - field.mean()) / (field.std() + 1e-8)


def _gaussian_blur(image: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian blur through the FFT (periodic boundary), ``sigma`` in pixels."""
    fy = np.fft.fftfreq(image.shape[0])[:, None]
    fx = np.fft.rfftfreq(image.shape[1])[None, :]
    kernel = np.exp(-2.0 * (np.pi * sigma) ** 2 * (fy**2 + fx**2))
    return np.fft.irfft2(np.fft.rfft2(image) * kernel, s=image.shape)


def _ellipse(
    x: np.ndarray,
    y: np.ndarray,
    cx: float,
    cy: float,
    ax: float,
    ay: float,
    angle: float = 0.0,
    harmonics: np.ndarray | None = None,
) -> np.ndarray:
    """Normalised elliptic radius (< 1 inside) of an ellipse (centre, semi-axes, rotation), whose
    boundary is optionally perturbed by Fourier ``harmonics`` rows (k, amplitude, phase)."""
    c, s = np.cos(angle), np.sin(angle)
    u, v = (x - cx) * c + (y - cy) * s, -(x - cx) * s + (y - cy) * c
    radius = np.sqrt((u / max(ax, 1e-6)) ** 2 + (v / max(ay, 1e-6)) ** 2)
    return radius if harmonics is None else radius / (1.0 + _fourier(np.arctan2(v, u), harmonics))


def _fourier(psi: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return sum(a * np.cos(k * psi + p) for k, a, p in rows)


def _angle_diff(a: np.ndarray, b: float) -> np.ndarray:
    return np.angle(np.exp(1j * (a - b)))


def _heart_geometry(p: _Patient, s: float, phase: int, psi: np.ndarray) -> dict[str, np.ndarray]:
    """Boundary radii (mm) around the LV centre as functions of the polar angle ``psi``."""
    depth = min(1.0, s + p.base_shift * (1.0 - s)) if phase else s  # base descends at ES
    angle = p.lv_angle + p.twist * depth
    shape = 1.0 / np.sqrt((np.cos(psi - angle) / (1 + p.lv_ecc)) ** 2 + (np.sin(psi - angle) / (1 - p.lv_ecc)) ** 2)
    shape = shape * (1.0 + _fourier(psi, p.harmonics))
    taper = np.sqrt(max(0.0, 1.0 - (depth * p.apex) ** 2))
    r_lv = p.lv_radius * (1.0 + 0.08 * (1.0 - depth)) * taper * shape
    wall = p.wall * (1.0 - 0.3 * depth) * (1.0 + p.wall_var * np.cos(psi - p.wall_angle))
    if p.thin_angle is not None:
        wall = wall * (1.0 - 0.45 * np.exp(-((_angle_diff(psi, p.thin_angle) / 0.5) ** 2)))
    r_out = r_lv + wall
    rv = p.rv_width * np.sqrt(max(0.0, 1.0 - (depth / p.rv_extent) ** 2))
    if phase:
        r_lv_es = r_lv * p.lv_es
        r_out = np.sqrt(r_lv_es**2 + r_out**2 - r_lv**2)  # incompressible myocardium
        r_lv, rv = r_lv_es, rv * p.rv_es
    offset = np.abs(_angle_diff(psi, p.rv_angle)) / p.rv_span
    rv_profile = np.clip(np.cos(0.5 * np.pi * np.minimum(offset, 1.0)), 0, None) ** 0.5
    rv_width = rv * rv_profile if rv >= 2.0 else np.zeros_like(psi)
    return {"lv": r_lv, "out": r_out, "rv": rv_width, "depth": np.float64(depth)}


def _tissue_map(
    p: _Patient, s: float, phase: int, x: np.ndarray, y: np.ndarray, textures: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Tissue classes and ACDC labels of one slice at normalised depth ``s`` (0 base, 1 apex)."""
    cx, cy = p.center + p.drift * s
    dx, dy = x - cx, y - cy
    rho, psi = np.hypot(dx, dy), np.arctan2(dy, dx)
    geo = _heart_geometry(p, s, phase, psi)
    geo_ed = geo if phase == 0 else _heart_geometry(p, s, 0, psi)
    tissue = np.full(x.shape, AIR, dtype=np.int8)

    # body: subcutaneous fat, chest-wall muscle, marbled muscle and fat inside, mediastinum
    bx, by = p.body_axes
    body = _ellipse(x, y, cx + p.body_dx, cy - p.skin_gap + by, bx, by)
    inner = 1 - (p.fat_layer + p.muscle_layer) / by
    tissue[body < 1] = FAT
    tissue[(body <= 1 - p.fat_layer / by) & (textures[1] < 1.5)] = MUSCLE
    heart_zone = rho < geo_ed["out"] + geo_ed["rv"] + p.rv_wall + 4.0
    mediastinum = rho < geo_ed["out"] + geo_ed["rv"] + 18.0
    tissue[(body < inner) & mediastinum & (textures[1] < 0.8)] = SOFT

    # lungs (kept off the heart and chest wall, with vessels), liver, aorta, spine
    lung_scale = 1.0 - 0.3 * s
    for (ldx, ldy, lax, lay, lang), shape in zip(p.lungs, p.lung_shape):
        lung = _ellipse(x, y, cx + ldx, cy + ldy, lax * lung_scale, lay * lung_scale, lang, shape)
        tissue[(lung < 1) & (body < inner) & ~heart_zone] = LUNG
    tissue[(tissue == LUNG) & (textures[0] > 2.4)] = SOFT
    ldx, ldy, lax, lay, start = p.liver
    amount = np.sqrt(np.clip((s - start) / (1.0 - start), 0.0, 1.0))
    if amount > 0:
        liver = _ellipse(x, y, cx + ldx, cy + ldy, lax * amount, lay * amount, 0.3, p.lung_shape[0])
        tissue[(liver < 1) & (body < inner) & ~heart_zone] = LIVER
    adx, ady, ar = p.aorta
    tissue[np.hypot(x - cx - adx, y - cy - ady) < ar] = AORTA
    sdx, sdy, sr = p.spine
    tissue[np.hypot(x - cx - sdx, y - cy - sdy) < sr] = BONE

    # heart: epicardial fat, RV free wall, RV cavity, myocardium, LV cavity, papillary muscles
    fat = np.clip(_fourier(psi, p.epi_fat), 0, None) * (1.0 + geo["depth"])
    tissue[(rho < geo["out"] + fat) & (geo["rv"] == 0)] = FAT
    rv_outer = geo["out"] + geo["rv"]
    tissue[(geo["rv"] > 0) & (rho < rv_outer + p.rv_wall)] = RV_WALL
    rv_cavity = (geo["rv"] > 0) & (rho >= geo["out"]) & (rho < rv_outer)
    tissue[rv_cavity] = RV_BLOOD
    tissue[rho < geo["out"]] = MYO
    lv = rho < geo["lv"]
    tissue[lv] = LV_BLOOD
    r_mean = float(geo["lv"].mean())
    if 0.12 < s < 0.8 and r_mean > 2.5 * p.papillary_radius:
        radius = p.papillary_radius * (1.2 if phase else 1.0)
        for angle in p.papillary_angles:
            d = r_mean - 0.9 * radius
            px, py = cx + d * np.cos(angle), cy + d * np.sin(angle)
            tissue[lv & (np.hypot(x - px, y - py) < radius)] = PAPILLARY

    label = np.zeros(x.shape, dtype=np.uint8)
    label[rv_cavity] = 1
    label[rho < geo["out"]] = 2
    label[lv] = 3
    return tissue, label


def _render(
    p: _Patient, tissue: np.ndarray, textures: tuple[np.ndarray, np.ndarray], bias: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """MR-like magnitude image of a tissue map: textures, blur, bias field, Rician noise."""
    image = p.intensity[tissue] * (1.0 + _TEXTURE[0][tissue] * textures[0] + _TEXTURE[1][tissue] * textures[1])
    image = np.clip(_gaussian_blur(np.clip(image, 0, None), p.blur), 0, None) * bias
    real = image + p.noise * rng.standard_normal(image.shape)
    return np.hypot(real, p.noise * rng.standard_normal(image.shape))


def _bias_field(p: _Patient, rng: np.random.Generator, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    gy, gx, amp = p.bias
    extent = max(float(np.abs(x).max()), float(np.abs(y).max()))
    smooth = _smooth_noise(rng, x.shape, sigma=x.shape[0] / 6)
    return np.exp(gy * y / extent + gx * x / extent + amp * smooth)


def _write_patient(
    folder: Path, name: str, info: dict[str, object], frames: dict[int, tuple[np.ndarray, np.ndarray]]
) -> None:
    import nibabel as nib  # here, not at the top: code that imports the phantom without writing one needs no nibabel

    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"{key}: {info[key]}" for key in ("ED", "ES", "Group", "Height", "NbFrame", "Weight")]
    (folder / "Info.cfg").write_text("\n".join(lines) + "\n")
    affine = np.diag([*info["spacing"], 1.0])
    for frame, (image, label) in frames.items():
        for suffix, array in (("", image), ("_gt", label)):
            nifti = nib.Nifti1Image(array, affine)
            nifti.header.set_xyzt_units("mm")
            nib.save(nifti, folder / f"{name}_frame{frame:02d}{suffix}.nii.gz")


def synthesize_patient(
    rng: np.random.Generator, group: str, image_size: tuple[int, int] = (128, 128)
) -> tuple[dict[str, object], dict[int, tuple[np.ndarray, np.ndarray]]]:
    """Synthesize one patient's ED and ES volumes.

    Args:
        rng: random generator (all randomness comes from it).
        group: pathology group, one of :data:`~gcl_monai.data.acdc.ACDC_GROUPS`.
        image_size: in-plane size (rows, columns).

    Returns:
        ``(info, frames)``: ``info`` has ``ED``, ``ES``, ``Group``, ``Height``, ``NbFrame``,
        ``Weight`` and ``spacing`` (mm); ``frames`` maps frame number to ``(image, label)`` arrays
        of shape ``(*image_size, num_slices)``, slices from base (index 0) to apex; images are int16,
        labels uint8 (0 background, 1 RV, 2 Myo, 3 LV).
    """
    p = _sample_patient(rng, group, image_size)
    rows = (np.arange(image_size[0]) - (image_size[0] - 1) / 2) * p.spacing
    cols = (np.arange(image_size[1]) - (image_size[1] - 1) / 2) * p.spacing
    y, x = np.meshgrid(rows, cols, indexing="ij")
    bias = _bias_field(p, rng, x, y)
    shape = (*image_size, p.num_slices)
    frames = {f: (np.zeros(shape, np.int16), np.zeros(shape, np.uint8)) for f in (1, p.es_frame)}
    for k in range(p.num_slices):
        s = k / (p.num_slices - 1)
        textures = (_smooth_noise(rng, image_size, 0.8), _smooth_noise(rng, image_size, 3.0))
        for phase, frame in enumerate((1, p.es_frame)):
            tissue, label = _tissue_map(p, s, phase, x, y, textures)
            image = _render(p, tissue, textures, bias, rng)
            frames[frame][0][..., k] = np.clip(np.round(image * p.gain), 0, np.iinfo(np.int16).max)
            frames[frame][1][..., k] = label
    info = {
        "ED": 1,
        "ES": p.es_frame,
        "Group": p.group,
        "Height": p.height,
        "NbFrame": p.num_frames,
        "Weight": p.weight,
        "spacing": (p.spacing, p.spacing, SLICE_THICKNESS_MM),
    }
    return info, frames


def generate_acdc_phantom(
    out_dir: str | Path, num_patients: int = 20, seed: int = 0, image_size: tuple[int, int] = (128, 128)
) -> Path:
    """Write a synthetic cardiac cine MRI dataset in the official ACDC layout.

    Writes ``out_dir/training/patientXXX/{Info.cfg, patientXXX_frame01.nii.gz (ED),
    patientXXX_frameYY.nii.gz (ES, YY in 8..14), ..._gt.nii.gz}``, readable by
    :func:`~gcl_monai.data.acdc.read_acdc`. Groups come in blocks of ``num_patients / 5`` patients
    (DCM, HCM, MINF, NOR, RV) like ACDC. Patient ``i`` depends only on ``(seed, i)``, so a larger
    ``num_patients`` extends a smaller dataset.

    Args:
        out_dir: output folder (created; patient folders of an earlier, larger run are left in place
            with a warning).
        num_patients: number of patients.
        seed: random seed; the same seed gives identical files.
        image_size: in-plane size (rows, columns); spacing is about 1.35-1.7 mm, slices 10 mm.

    Returns:
        ``out_dir`` as a :class:`~pathlib.Path`, the dataset root to pass to the readers.

    Raises:
        ValueError: when ``num_patients`` < 1 or ``image_size`` is smaller than 32 pixels.
    """
    if num_patients < 1:
        raise ValueError(f"num_patients must be >= 1, got {num_patients}.")
    if len(image_size) != 2 or min(image_size) < 32:
        raise ValueError(f"image_size must be two sizes >= 32, got {image_size}.")
    out_dir = Path(out_dir)
    written = {f"patient{i + 1:03d}" for i in range(num_patients)}
    training = out_dir / "training"
    stale = sorted(p.name for p in training.glob("patient*") if p.name not in written) if training.is_dir() else []
    if stale:
        logger.warning(
            "%s already holds other patient folders (%s...), which the readers will list too.",
            training,
            ", ".join(stale[:3]),
        )
    for i in range(num_patients):
        name = f"patient{i + 1:03d}"
        group = ACDC_GROUPS[i * len(ACDC_GROUPS) // num_patients]
        info, frames = synthesize_patient(np.random.default_rng([seed, i]), group, tuple(image_size))
        _write_patient(out_dir / "training" / name, name, info, frames)
    logger.info("Wrote %d synthetic ACDC patients to %s.", num_patients, out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m gcl_monai.data.phantom --out DIR --num-patients N --seed S``."""
    parser = argparse.ArgumentParser(description="Write a synthetic cardiac MRI dataset in the ACDC layout.")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--num-patients", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--image-size", type=int, nargs=2, default=(128, 128), metavar=("ROWS", "COLS"))
    args = parser.parse_args(argv)
    root = generate_acdc_phantom(args.out, args.num_patients, args.seed, tuple(args.image_size))
    print(root)


if __name__ == "__main__":
    main()
