"""A per-slice MONAI random transform (the fine-tuning augmentation) applied to a whole batch of 2D slices at once."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import torch
from monai.networks.layers import AffineTransform
from monai.transforms import (
    Compose,
    EnsureTyped,
    RandAdjustContrastd,
    RandAffined,
    RandFlipd,
    RandScaleIntensityd,
    RandStdShiftIntensityd,
)
from monai.utils import ensure_tuple, fall_back_tuple, get_equivalent_dtype, issequenceiterable

from gcl_monai.transforms.device_generators import DeviceGenerators
from gcl_monai.transforms.views import RandRelativeGaussianNoised

__all__ = ["BatchSliceAugmentation"]

#: offset of MONAI's ``AdjustContrast`` that keeps a constant slice finite.
_GAMMA_EPS = 1e-7

Params = dict[str, Any]


def _ranges(param_range: Sequence | float | None) -> list[tuple[float, float]]:
    """
    The ``(low, high)`` of each parameter that ``RandAffineGrid._get_rand_param`` draws from ``param_range``: an
    entry ``f`` is ``U(-f, f)``, a pair ``U(f[0], f[1])``, None draws nothing (the parameters that follow move up).
    """
    ranges = []
    for f in ensure_tuple(param_range):
        if issequenceiterable(f):
            if len(f) != 2:
                raise ValueError(f"a range as [min, max] needs 2 elements, got {f}.")
            ranges.append((float(f[0]), float(f[1])))
        elif f is not None:
            ranges.append((-float(f), float(f)))
    return ranges


def _factor_range(factors: Sequence[float]) -> tuple[float, float]:
    return float(factors[0]), float(factors[1])


def _float32_or_kept(dtype: Any) -> bool:
    """The output dtype of MONAI's intensity transforms that the batched form gives: float32 (their default), or
    the input's (None): the batches are float32."""
    return dtype is None or get_equivalent_dtype(dtype, torch.Tensor) == torch.float32


class _Step:
    """One transform of the list: which keys it changes, how it draws its parameters and how it applies them."""

    name: str
    spatial = False

    def __init__(self, transform: Any) -> None:
        self.name = type(transform).__name__
        self.keys = tuple(transform.keys)
        self.allow_missing_keys = bool(transform.allow_missing_keys)
        self.prob = float(getattr(transform, "prob", 1.0))

    def present(self, batch: Mapping[Hashable, torch.Tensor]) -> tuple[Hashable, ...]:
        """The step's keys in ``batch`` (a missing key raises as MONAI's ``key_iterator`` does)."""
        missing = [key for key in self.keys if key not in batch]
        if missing and not self.allow_missing_keys:
            raise KeyError(f"{self.name}: key {missing[0]!r} is not in the batch (keys: {list(batch)}).")
        return tuple(key for key in self.keys if key in batch)


class _Flip(_Step):
    """``RandFlipd``: with probability ``prob``, reverse every axis of ``spatial_axis`` (None: all)."""

    spatial = True

    def __init__(self, transform: RandFlipd) -> None:
        super().__init__(transform)
        if transform.lazy:
            raise ValueError(f"{self.name}: lazy=True cannot be reproduced by BatchSliceAugmentation.")
        axes = transform.flipper.spatial_axis
        self.axes = (0, 1) if axes is None else tuple(int(a) % 2 for a in ensure_tuple(axes))

    def randomize(self, draw: _Draw, sizes: dict) -> Params:
        return {"do": draw.happens(self.prob)}

    def matrix(self, params: Params) -> torch.Tensor:
        """Source position of an output pixel, in centred pixel coordinates: (N, 3, 3)."""
        sign = 1 - 2 * params["do"].to(torch.float32)
        ones = torch.ones_like(sign)
        diagonal = [sign if axis in self.axes else ones for axis in range(2)]
        return torch.diag_embed(torch.stack([*diagonal, ones], dim=1))


class _Affine(_Step):
    """
    ``RandAffined`` in 2D: with probability ``prob``, the source position of each output pixel (centred pixel
    coordinates, spatial axis 0 first) is ``R T S`` times its position, as MONAI's ``AffineGrid`` composes it
    (``create_rotate``, ``create_translate``, ``create_scale``): ``R`` the rotation by an angle ``U(rotate_range)``,
    ``T`` a shift ``U(translate_range)`` pixels per axis, ``S`` the scaling ``1 + U(scale_range)`` per axis.
    """

    spatial = True

    def __init__(self, transform: RandAffined) -> None:
        super().__init__(transform)
        affine = transform.rand_affine
        grid = affine.rand_affine_grid
        if transform.lazy:
            raise ValueError(f"{self.name}: lazy=True cannot be reproduced by BatchSliceAugmentation.")
        if _ranges(grid.shear_range):
            raise ValueError(f"{self.name}: shear_range cannot be reproduced by BatchSliceAugmentation.")
        if affine.resampler.align_corners:
            raise ValueError(f"{self.name}: align_corners=True cannot be reproduced by BatchSliceAugmentation.")
        self.rotate = _ranges(grid.rotate_range)[:1]  # 2D: create_rotate reads the first angle only
        self.translate = _ranges(grid.translate_range)[:2]
        self.scale = _ranges(grid.scale_range)[:2]
        self.spatial_size = affine.spatial_size
        modes = dict(zip(self.keys, ensure_tuple(transform.mode) * len(self.keys)))
        padding = dict(zip(self.keys, ensure_tuple(transform.padding_mode) * len(self.keys)))
        if len(ensure_tuple(transform.mode)) not in (1, len(self.keys)):
            raise ValueError(f"{self.name}: one mode per key expected, got {transform.mode}.")
        for key in self.keys:
            if modes[key] not in ("bilinear", "nearest") or padding[key] not in ("zeros", "border", "reflection"):
                raise ValueError(
                    f"{self.name}: mode {modes[key]!r} / padding_mode {padding[key]!r} of key {key!r} cannot be "
                    "reproduced by BatchSliceAugmentation (torch's grid_sample modes only)."
                )
        self.modes, self.padding = modes, padding

    def output_size(self, size: tuple[int, int]) -> tuple[int, int]:
        return tuple(int(s) for s in fall_back_tuple(self.spatial_size, size))

    def randomize(self, draw: _Draw, sizes: dict) -> Params:
        params = {"do": draw.happens(self.prob)}
        if self.rotate:
            params["rotate"] = draw.uniform(*self.rotate[0])
        if self.translate:
            params["translate"] = torch.stack([draw.uniform(*r) for r in self.translate], dim=1)
        if self.scale:
            params["scale"] = 1 + torch.stack([draw.uniform(*r) for r in self.scale], dim=1)
        return params

    def matrix(self, params: Params) -> torch.Tensor:
        """Source position of an output pixel, in centred pixel coordinates: (N, 3, 3); identity where not drawn."""
        do = params["do"]
        num = do.shape[0]
        dtype = torch.float32
        eye = torch.eye(3, dtype=dtype, device=do.device).expand(num, 3, 3)
        zero, one = torch.zeros(num, dtype=dtype, device=do.device), torch.ones(num, dtype=dtype, device=do.device)
        out = eye
        if "rotate" in params:
            angle = params["rotate"].to(torch.float32)  # create_rotate's torch backend: float32 sin and cos
            cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
            rows = [[cos, -sin, zero], [sin, cos, zero], [zero, zero, one]]
            out = out @ torch.stack([torch.stack(row, dim=1) for row in rows], dim=1)
        if "translate" in params:
            shift = params["translate"].to(dtype)
            columns = [shift[:, axis] if axis < shift.shape[1] else zero for axis in range(2)]
            rows = [[one, zero, columns[0]], [zero, one, columns[1]], [zero, zero, one]]
            out = out @ torch.stack([torch.stack(row, dim=1) for row in rows], dim=1)
        if "scale" in params:
            scale = params["scale"].to(dtype)
            diagonal = [scale[:, axis] if axis < scale.shape[1] else one for axis in range(2)]
            out = out @ torch.diag_embed(torch.stack([*diagonal, one], dim=1))
        return torch.where(do[:, None, None], out, eye)


class _Contrast(_Step):
    """``RandAdjustContrastd``: ``((x - min) / (max - min + 1e-7)) ** gamma * (max - min) + min``, ``U(gamma)``."""

    def __init__(self, transform: RandAdjustContrastd) -> None:
        super().__init__(transform)
        adjuster = transform.adjuster
        if adjuster.invert_image or adjuster.retain_stats:
            raise ValueError(
                f"{self.name}: invert_image / retain_stats cannot be reproduced by BatchSliceAugmentation."
            )
        self.gamma = _factor_range(adjuster.gamma)

    def randomize(self, draw: _Draw, sizes: dict) -> Params:
        return {"do": draw.happens(self.prob), "gamma": draw.uniform(*self.gamma)}

    def apply(self, x: torch.Tensor, params: Params, key: Hashable) -> torch.Tensor:
        low = x.amin(dim=(1, 2, 3), keepdim=True)
        span = x.amax(dim=(1, 2, 3), keepdim=True) - low
        gamma = params["gamma"].to(x.dtype)[:, None, None, None]
        out = ((x - low) / (span + _GAMMA_EPS)) ** gamma * span + low
        return torch.where(params["do"][:, None, None, None], out, x)


class _Scale(_Step):
    """``RandScaleIntensityd``: ``x * (1 + f)``, ``f`` ``U(factors)``."""

    def __init__(self, transform: RandScaleIntensityd) -> None:
        super().__init__(transform)
        scaler = transform.scaler
        if scaler.channel_wise or not _float32_or_kept(scaler.dtype):
            raise ValueError(f"{self.name}: channel_wise / dtype cannot be reproduced by BatchSliceAugmentation.")
        self.factors = _factor_range(scaler.factors)

    def randomize(self, draw: _Draw, sizes: dict) -> Params:
        return {"do": draw.happens(self.prob), "factor": draw.uniform(*self.factors)}

    def apply(self, x: torch.Tensor, params: Params, key: Hashable) -> torch.Tensor:
        x = x.to(torch.float32)
        factor = (params["factor"] * params["do"]).to(x.dtype)[:, None, None, None]
        return x * (1 + factor)


class _StdShift(_Step):
    """``RandStdShiftIntensityd``: ``x + f * std(x)`` (population std of the slice), ``f`` ``U(factors)``."""

    def __init__(self, transform: RandStdShiftIntensityd) -> None:
        super().__init__(transform)
        shifter = transform.shifter
        if shifter.nonzero or shifter.channel_wise or not _float32_or_kept(shifter.dtype):
            raise ValueError(
                f"{self.name}: nonzero / channel_wise / dtype cannot be reproduced by BatchSliceAugmentation."
            )
        self.factors = _factor_range(shifter.factors)

    def randomize(self, draw: _Draw, sizes: dict) -> Params:
        return {"do": draw.happens(self.prob), "factor": draw.uniform(*self.factors)}

    def apply(self, x: torch.Tensor, params: Params, key: Hashable) -> torch.Tensor:
        x = x.to(torch.float32)
        factor = (params["factor"] * params["do"]).to(x.dtype)[:, None, None, None]
        return x + factor * x.std(dim=(1, 2, 3), correction=0, keepdim=True)


class _Noise(_Step):
    """:class:`RandRelativeGaussianNoised`: ``x + n * f * std(x)`` (sample std per channel), ``f ~ U(0, fraction)``."""

    def __init__(self, transform: RandRelativeGaussianNoised) -> None:
        super().__init__(transform)
        self.std_fraction = float(transform.std_fraction)

    def randomize(self, draw: _Draw, sizes: dict) -> Params:
        fields = {key: draw.normal(channels, *size) for key, (channels, size) in sizes.items() if key in self.keys}
        return {"do": draw.happens(self.prob), "fraction": draw.uniform(0.0, self.std_fraction), "field": fields}

    def apply(self, x: torch.Tensor, params: Params, key: Hashable) -> torch.Tensor:
        fraction = (params["fraction"] * params["do"]).to(x.dtype)[:, None, None, None]
        return x + params["field"][key].to(x.dtype) * (fraction * x.std(dim=(2, 3), keepdim=True))


class _NoOp(_Step):
    """``EnsureTyped`` to tensors of the batch's dtype and device: nothing to do on a batch of tensors."""

    def __init__(self, transform: EnsureTyped) -> None:
        super().__init__(transform)
        converter = transform.converter
        dtypes = ensure_tuple(getattr(transform, "dtype", None))
        if converter.data_type != "tensor" or any(d is not None for d in dtypes) or converter.device is not None:
            raise ValueError(
                f"{self.name}: only the conversion to tensors (no dtype, no device) is reproduced by "
                "BatchSliceAugmentation."
            )

    def randomize(self, draw: _Draw, sizes: dict) -> Params:
        return {}


#: the MONAI transforms the batched form reproduces, and their steps
_STEPS: dict[type, Callable[[Any], _Step]] = {
    RandFlipd: _Flip,
    RandAffined: _Affine,
    RandAdjustContrastd: _Contrast,
    RandScaleIntensityd: _Scale,
    RandStdShiftIntensityd: _StdShift,
    RandRelativeGaussianNoised: _Noise,
    EnsureTyped: _NoOp,
}


class _Draw:
    """Draws for ``num`` slices on ``device`` from ``generator`` (None: torch's default generator of the device)."""

    def __init__(self, num: int, device: torch.device, generator: torch.Generator | None) -> None:
        self.num, self.device, self.generator = num, device, generator

    def happens(self, prob: float) -> torch.Tensor:
        """``R.rand() < prob`` of each slice: (N,) bool."""
        return torch.rand(self.num, generator=self.generator, device=self.device) < prob

    def uniform(self, low: float, high: float) -> torch.Tensor:
        """``R.uniform(low, high)`` of each slice: (N,) float32."""
        return low + (high - low) * torch.rand(self.num, generator=self.generator, device=self.device)

    def normal(self, *shape: int) -> torch.Tensor:
        return torch.randn(self.num, *shape, generator=self.generator, device=self.device)


def _flatten(transform: Any) -> list:
    if isinstance(transform, Compose):
        if type(transform) is not Compose or transform.map_items is not True or transform.lazy:
            raise ValueError(
                f"{type(transform).__name__} (map_items={transform.map_items}, lazy={transform.lazy}) cannot be "
                "reproduced by BatchSliceAugmentation: only a plain Compose of the supported transforms."
            )
        return [step for t in transform.transforms for step in _flatten(t)]
    return [transform]


class BatchSliceAugmentation(torch.nn.Module):
    """
    A per-slice MONAI random transform of 2D slices (a ``Compose`` such as
    :func:`gcl_monai.transforms.finetune_transforms`, the bundles' ``train#preprocessing``) applied to a whole batch
    ``{key: (N, C, H, W)}`` at once, on the batch's device: each slice's random parameters are drawn from the
    distribution the per-slice transform draws them from (each transform's own ``prob`` and ranges, read from it),
    as tensors for the whole batch, and applied with batched torch and MONAI operations. No loop over the slices, no
    host read of a device value, no copy between the host and the device.

    The transforms it reproduces, in the list's order, each with the keys it lists (one set of parameters per slice
    shared by its keys, as MONAI's dictionary transforms share theirs):

    - ``RandFlipd``: the slice reversed along ``spatial_axis`` with probability ``prob``;
    - ``RandAffined`` (2D, no shear): with probability ``prob``, an angle ``U(rotate_range)``, a shift
      ``U(translate_range)`` and scale ``1 + U(scale_range)`` per axis (each entry ``f`` as ``U(-f, f)``), composed
      as MONAI's ``AffineGrid`` composes them about the slice's centre, resampled to ``spatial_size`` with the key's
      ``mode`` and ``padding_mode`` (``align_corners=False``, as MONAI's ``Resample``). The flips that precede it in
      the list are folded into the same resampling (a flip is exact at the pixel centres; flips with no affine are
      resampled alone, nearest, which is exact too), so each key is resampled
      once, by ``monai.networks.layers.AffineTransform`` with an ``(N, 3, 3)`` batch of matrices in grid_sample's
      normalised coordinates (``normalized=True``: MONAI's own normalisation builds its matrices on the host, a
      copy to the device per call). The keys of a slice that draws neither a flip nor the affine are returned as
      they came (as MONAI returns them), only cast to float32;
    - ``RandAdjustContrastd`` (``((x - min) / (max - min + 1e-7)) ** gamma * (max - min) + min`` over the slice,
      gamma ``U(gamma)``), ``RandScaleIntensityd`` (``x * (1 + f)``), ``RandStdShiftIntensityd`` (``x + f * std(x)``,
      population std of the slice), :class:`gcl_monai.transforms.RandRelativeGaussianNoised` (``x + n * f *
      std(x)``, sample std per channel, ``n`` standard normal, ``f`` ``U(0, std_fraction)``), each with its
      ``prob``;
    - ``EnsureTyped`` to tensors (nothing to do).

    Anything else in the list (another transform, or an option of these that it does not reproduce: shear, lazy
    resampling, channel-wise intensities, ...) raises a ``ValueError`` naming it when this class is built: the
    batched form never skips a step silently.

    What differs from the per-slice transform: the random stream (torch's, on the device, instead of each
    transform's NumPy state), so the same seed gives other draws from the same distribution; and the float
    rounding of the resampling positions (for the same parameters the image within 2e-5 of the per-slice one, 3.4e-6
    at most seen; a label pixel whose source position falls within rounding of a pixel boundary may take its
    neighbour's value, none seen).
    ``tests/transforms/test_batch_augmentation.py`` checks both, parameters set by hand through the per-slice
    transforms themselves, and the drawn parameters' distributions against the ranges and MONAI's own draws.

    Randomness: with ``seed=None`` the parameters are drawn from torch's default generator of the batch's device
    (which ``monai.utils.set_determinism``, hence :py:class:`gcl_monai.handlers.EpochSeedHandler`, seeds); with a
    seed, from a ``torch.Generator`` of the device seeded with it at its first use.

    Args:
        transform: the per-slice transform (a ``Compose``, nested ones flattened, or a single transform).
        seed: seed of the augmentation's own generator; None draws from torch's default generator.

    Raises:
        ValueError: a transform of the list (named in the message) that the batched form cannot reproduce.
    """

    def __init__(self, transform: Any, seed: int | None = None) -> None:
        super().__init__()
        self.steps: list[_Step] = []
        for t in _flatten(transform):
            make = _STEPS.get(type(t))
            if make is None:
                raise ValueError(
                    f"{type(t).__name__} cannot be reproduced by BatchSliceAugmentation (it reproduces "
                    f"{', '.join(c.__name__ for c in _STEPS)}): use the per-slice transform."
                )
            self.steps.append(make(t))
        self._resamplers: dict[tuple, AffineTransform] = {}
        self.set_random_state(seed)

    def set_random_state(self, seed: int | None = None) -> BatchSliceAugmentation:
        """Draw from a generator seeded with ``seed`` (one per device), or from torch's default one (None)."""
        self.seed = seed
        self._generator = DeviceGenerators(seed)
        return self

    def randomize(self, batch: Mapping[Hashable, torch.Tensor]) -> list[Params]:
        """
        Draw every step's parameters for each slice of ``batch``, on its device.

        Returns:
            one dictionary per step of the list (``{}`` for ``EnsureTyped``): ``"do"``: (N,) bool, whether the
            slice draws the transform; the flips nothing else; the affine ``"rotate"`` (N,) radians,
            ``"translate"`` (N, k) pixels and ``"scale"`` (N, k) factors (those it has ranges for); the contrast
            ``"gamma"``, the scale and the shift ``"factor"``, the noise ``"fraction"``: (N,); the noise
            ``"field"``: ``{key: (N, C, H, W)}`` standard normal samples. All float32 but the masks.
        """
        first = next(iter(batch.values()))
        draw = _Draw(first.shape[0], first.device, self._generator(first.device))
        sizes = {key: (value.shape[1], tuple(value.shape[2:])) for key, value in batch.items()}
        params = []
        for step in self.steps:
            params.append(step.randomize(draw, sizes))
            if isinstance(step, _Affine):
                for key in (key for key in step.keys if key in sizes):
                    sizes[key] = (sizes[key][0], step.output_size(sizes[key][1]))
        return params

    def _resampler(self, mode: str, padding_mode: str, size: tuple[int, int]) -> AffineTransform:
        if (mode, padding_mode, size) not in self._resamplers:
            self._resamplers[mode, padding_mode, size] = AffineTransform(
                spatial_size=size,
                normalized=True,
                mode=mode,
                padding_mode=padding_mode,
                align_corners=False,
                reverse_indexing=False,  # swapped here: MONAI's swap indexes with a tensor made on the host
            )
        return self._resamplers[mode, padding_mode, size]

    @staticmethod
    def _theta(geometry: dict, source: Sequence[int]) -> torch.Tensor:
        """
        The composed matrix of ``geometry`` (centred pixel coordinates, axis 0 first) in grid_sample's normalised
        coordinates, as MONAI's ``Resample`` maps positions (``align_corners=False``: the source pixel of a centred
        position ``q`` along an axis of ``n`` pixels is ``q + (n - 1) / 2``, its normalised coordinate ``2 q / n``).
        """
        matrix, size = geometry["matrix"], geometry["size"]
        # rows scaled by 2 / source side, the linear columns by destination side / 2
        rows = [matrix[:, axis] * (2.0 / source[axis]) for axis in range(2)]
        linear = torch.stack(
            [torch.stack([row[:, 0] * (size[0] / 2.0), row[:, 1] * (size[1] / 2.0), row[:, 2]], dim=1) for row in rows],
            dim=1,
        )
        # grid_sample's coordinates are (x, y) = (axis 1, axis 0): swap both the rows and the columns
        theta = torch.cat([linear[:, :, :2].flip(1).flip(2), linear[:, :, 2:].flip(1)], dim=2)
        return torch.cat([theta, matrix[:, 2:]], dim=1)  # the (0, 0, 1) row: (N, 3, 3)

    def _resample(self, x: torch.Tensor, entry: dict, thetas: dict) -> torch.Tensor:
        """Resample ``x`` by its pending spatial steps (``entry``); ``thetas`` caches a geometry's matrix."""
        geometry = entry["geometry"]
        touched, size = geometry["touched"], geometry["size"]
        if id(geometry) not in thetas:
            thetas[id(geometry)] = self._theta(geometry, x.shape[2:])
        theta = thetas[id(geometry)]
        if entry["mode"] is None:  # flips alone (as MONAI's Flip, the dtype kept): exact at the pixel centres
            out = self._resampler("nearest", "zeros", size)(x.to(torch.float32), theta).to(x.dtype)
            return torch.where(touched[:, None, None, None], out, x)
        x = x.to(torch.float32)
        out = self._resampler(entry["mode"], entry["padding_mode"], size)(x, theta)
        if size != tuple(x.shape[2:]):
            return out
        return torch.where(touched[:, None, None, None], out, x)

    def apply(self, batch: Mapping[Hashable, torch.Tensor], params: Sequence[Params]) -> dict[Hashable, torch.Tensor]:
        """
        Apply drawn parameters (:py:meth:`randomize`) to a batch.

        Args:
            batch: ``{key: (N, C, H, W)}`` on one device; keys the list does not name pass unchanged.
            params: one dictionary per step, on the batch's device.

        Returns:
            a new dictionary, the transformed batch.
        """
        out = dict(batch)
        # the spatial steps not yet resampled, per key: {"geometry", "mode", "padding_mode"}; the keys that went
        # through the same steps share one geometry (the composed matrix, computed once, and the output size)
        pending: dict[Hashable, dict] = {}
        thetas: dict[int, torch.Tensor] = {}

        def flush(key: Hashable) -> None:
            if key in pending:
                out[key] = self._resample(out[key], pending.pop(key), thetas)

        for step, p in zip(self.steps, params):
            keys = step.present(out)
            if step.spatial:
                is_affine = isinstance(step, _Affine)
                for key in keys:
                    if is_affine and key in pending and pending[key]["mode"] is not None:
                        flush(key)  # a second affine: resampled again, as per slice
                matrix = step.matrix(p) if keys else None
                updated: dict[Hashable, dict] = {}
                for key in keys:
                    old = pending[key]["geometry"] if key in pending else None
                    group = id(old) if old is not None else tuple(out[key].shape)
                    if group not in updated:
                        size = old["size"] if old is not None else tuple(out[key].shape[2:])
                        updated[group] = {
                            "matrix": matrix if old is None else old["matrix"] @ matrix,
                            "touched": p["do"] if old is None else old["touched"] | p["do"],
                            "size": step.output_size(size) if is_affine else size,
                        }
                    entry = pending.setdefault(key, {"mode": None, "padding_mode": None})
                    entry["geometry"] = updated[group]
                    if is_affine:
                        entry["mode"], entry["padding_mode"] = step.modes[key], step.padding[key]
                continue
            for key in keys:
                flush(key)
                if not isinstance(step, _NoOp):
                    out[key] = step.apply(out[key], p, key)
        for key in list(pending):
            flush(key)
        return out

    def forward(self, batch: Mapping[Hashable, torch.Tensor]) -> dict[Hashable, torch.Tensor]:
        """
        Args:
            batch: ``{key: (N, C, H, W)}`` un-augmented slices on one device.

        Returns:
            the augmented batch (a new dictionary), each slice with its own drawn parameters.

        Raises:
            ValueError: a tensor of the batch is not a batch of channel-first 2D slices.
            KeyError: a key of a step is missing from the batch (and the step does not allow it).
        """
        for key, value in batch.items():
            if value.ndim != 4:
                raise ValueError(f"expected channel-first 2D slices (N, C, H, W) under {key!r}, got {value.shape}.")
        return self.apply(batch, self.randomize(batch))
