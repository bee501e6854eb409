"""Contrastive views of a whole batch of 2D slices, drawn and applied on the batch's device."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from monai.utils import ensure_tuple_rep

from gcl_monai.transforms.device_generators import DeviceGenerators
from gcl_monai.transforms.view_strengths import ViewStrengths

__all__ = ["BatchContrastiveViews"]

#: offset of MONAI's ``AdjustContrast`` that keeps a constant slice finite.
_GAMMA_EPS = 1e-7
#: extent of MONAI's ``GaussianFilter`` kernels, in sigmas.
_BLUR_TRUNCATED = 4.0


class BatchContrastiveViews(torch.nn.Module):
    """
    The views of :class:`gcl_monai.transforms.ContrastiveViewsd` for a batch of slices ``(B, C, H, W)`` at once,
    on the batch's device: every random parameter is drawn as a tensor for the whole batch, so there is no loop
    over the slices and no host synchronisation.

    Each view is made by these steps, each drawn from the distribution of the per-slice transform it reproduces:

    1. geometry, one resampling (``affine_grid`` + bilinear ``grid_sample``) of the affine map from the view to the
       slice that composes, in the per-slice order:

       - the random resized crop of ``RandScaleCropd`` + ``Resized``: each side an integer number of pixels in
         ``[ceil(crop_scale[0] * side), ceil(crop_scale[1] * side)]``, the corner uniform over the valid positions,
         the box stretched to ``spatial_size`` (``align_corners=False``);
       - ``RandFlipd`` along each spatial axis with probability ``flip_prob``;
       - ``RandRotated`` about the view's centre by an angle uniform in +-``rotate_degrees`` (with ``rotate_prob``;
         MONAI's sense of rotation).

       The sampling positions are clamped to the crop box's pixel centres, as ``Resized`` clamps its source
       positions (so ``grid_sample``'s own padding never acts), and the result is multiplied by the weight that
       ``RandRotated``'s bilinear zero padding gives a position outside the view (in closed form: the bilinear
       weight of the view's pixels there), so the corners a rotation uncovers are zero as in the per-slice
       pipeline;

    2. ``RandAdjustContrastd``: ``((x - min) / (max - min + 1e-7)) ** gamma * (max - min) + min`` over the view,
       gamma uniform in ``gamma`` (with ``gamma_prob``);
    3. ``RandScaleIntensityd``: ``x * (1 + f)``, ``f`` uniform in +-``scale_factor`` (with ``scale_prob``);
    4. ``RandStdShiftIntensityd``: ``x + f * std(x)`` (population std of the view), ``f`` uniform in
       +-``shift_factor`` (with ``shift_prob``);
    5. :class:`gcl_monai.transforms.RandRelativeGaussianNoised`: zero-mean Gaussian noise of std
       ``f * std(x)`` per channel (sample std), ``f`` uniform in ``[0, noise_std_fraction]`` (with ``noise_prob``);
    6. ``RandGaussianSmoothd``: MONAI's ``GaussianFilter`` (``erf`` kernel, zero padding), one sigma per spatial
       axis uniform in ``blur_sigma`` (with ``blur_prob``), as a grouped separable convolution with one kernel per
       view; every kernel has the radius of the largest sigma (MONAI truncates each at its own 4 sigma; the taps
       beyond are below 1e-4 of the kernel's sum).

    Differences from the per-slice pipeline: without a rotation the views are the same to float precision; after
    a rotation the per-slice views have been resampled twice (``Resized`` then ``RandRotated``) and these once, so
    they are slightly sharper (one bilinear interpolation less). ``Resized``'s anti-aliasing is not reproduced: it
    only acts when a crop is larger than ``spatial_size``, never for slices of ``spatial_size`` (the bundles').
    ``tests/transforms/test_batch_views.py`` compares the statistics of both pipelines' views.

    Randomness: with ``seed=None`` the parameters are drawn from torch's default generator of the batch's device,
    which ``torch.manual_seed`` (``monai.utils.set_determinism``, hence
    :py:class:`gcl_monai.handlers.EpochSeedHandler` at every epoch) seeds; with a seed, from a ``torch.Generator``
    on the batch's device seeded with it at the first call (see :py:meth:`set_random_state`).

    Args:
        spatial_size: in-plane size of the views (an int for a square).
        num_views: number of views of each slice (two or more).
        seed: seed of the views' own generator; None draws from torch's default generator.
        strengths: the fields of :class:`gcl_monai.transforms.ViewStrengths` (e.g. ``rotate_degrees=30``); the
            others keep their defaults, the same as :class:`gcl_monai.transforms.ContrastiveViewsd`'s.

    Raises:
        ValueError: fewer than two views, or an invalid strength (see ``ViewStrengths``).
        TypeError: a keyword that is not a field of ``ViewStrengths``.
    """

    def __init__(
        self,
        spatial_size: Sequence[int] | int = (128, 128),
        num_views: int = 2,
        seed: int | None = None,
        **strengths: Any,
    ) -> None:
        super().__init__()
        if num_views < 2:
            raise ValueError(f"BatchContrastiveViews needs at least two views, got {num_views}.")
        self.strengths = ViewStrengths(**strengths)
        self.spatial_size = tuple(int(s) for s in ensure_tuple_rep(spatial_size, 2))
        self.blur_radius = int(max(self.strengths.blur_sigma[1] * _BLUR_TRUNCATED, 0.5) + 0.5)
        self.num_views = num_views
        self.set_random_state(seed)

    def set_random_state(self, seed: int | None = None) -> BatchContrastiveViews:
        """
        Draw from a generator seeded with ``seed`` (created on each device at its first use), or from torch's
        default generator when ``seed`` is None.

        Args:
            seed: seed of the views' generator.

        Returns:
            this transform.
        """
        self.seed = seed
        self._generator = DeviceGenerators(seed)
        return self

    def randomize(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """
        Draw the parameters of one view of each slice, on the slices' device.

        Args:
            images: ``(N, C, H, W)`` slices.

        Returns:
            ``"crop_size"`` and ``"crop_corner"``: ``(N, 2)`` box in pixels of the slice, (row, column);
            ``"flip"``: ``(N, 2)`` bool, flip along (rows, columns); ``"angle"``: ``(N,)`` radians (0: none);
            ``"do_gamma"``: ``(N,)`` bool and ``"gamma"``: ``(N,)`` exponent; ``"scale"``, ``"shift"``,
            ``"noise"``: ``(N,)`` factors (0: none); ``"noise_field"``: ``(N, C, *spatial_size)`` standard normal
            samples of the images' dtype; ``"do_blur"``: ``(N,)`` bool and ``"blur_sigma"``: ``(N, 2)`` sigma along
            (rows, columns). All but the masks and the noise field are float32.
        """
        num, channels = images.shape[:2]
        device = images.device
        generator = self._generator(device)
        strengths = self.strengths
        rotate = math.radians(strengths.rotate_degrees)

        def uniform(low: float, high: float, *shape: int) -> torch.Tensor:
            return low + (high - low) * torch.rand(num, *shape, generator=generator, device=device)

        def happens(prob: float, *shape: int) -> torch.Tensor:
            return torch.rand(num, *shape, generator=generator, device=device) < prob

        # per side, RandScaleCrop's R.randint(low, high + 1), then get_random_patch's randint over the corners
        size_draws = torch.rand(num, 2, generator=generator, device=device)
        corner_draws = torch.rand(num, 2, generator=generator, device=device)
        sizes, corners = [], []
        for axis, side in enumerate(images.shape[2:]):
            low, high = (math.ceil(scale * side) for scale in strengths.crop_scale)
            size = low + torch.floor(size_draws[:, axis] * (high - low + 1)).clamp(max=high - low)
            sizes.append(size)
            corners.append(torch.minimum(torch.floor(corner_draws[:, axis] * (side - size + 1)), side - size))
        return {
            "crop_size": torch.stack(sizes, dim=1),
            "crop_corner": torch.stack(corners, dim=1),
            "flip": happens(strengths.flip_prob, 2),
            "angle": uniform(-rotate, rotate) * happens(strengths.rotate_prob),
            "do_gamma": happens(strengths.gamma_prob),
            "gamma": uniform(*strengths.gamma),
            "scale": uniform(-strengths.scale_factor, strengths.scale_factor) * happens(strengths.scale_prob),
            "shift": uniform(-strengths.shift_factor, strengths.shift_factor) * happens(strengths.shift_prob),
            "noise": uniform(0.0, strengths.noise_std_fraction) * happens(strengths.noise_prob),
            "noise_field": torch.randn(
                num, channels, *self.spatial_size, generator=generator, device=device, dtype=images.dtype
            ),
            "do_blur": happens(strengths.blur_prob),
            "blur_sigma": uniform(*strengths.blur_sigma, 2),
        }

    def _geometry(self, images: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """Crop, resize, flip and rotate: one ``grid_sample`` of the composed affine map per view."""
        num, channels = images.shape[:2]
        height, width = self.spatial_size
        dtype = images.dtype
        # rotation about the view's centre in normalised coordinates (x: columns, y: rows) of a possibly
        # non-square view; MONAI's Rotate reads the source at (x cos + y sin, -x sin + y cos) in pixels
        cos, sin = params["angle"].to(dtype).cos(), params["angle"].to(dtype).sin()
        zero = torch.zeros_like(cos)
        rotation = torch.stack(
            [
                torch.stack([cos, sin * height / width, zero], dim=1),
                torch.stack([-sin * width / height, cos, zero], dim=1),
            ],
            dim=1,
        )
        view = F.affine_grid(rotation, [num, channels, height, width], align_corners=False)
        # then, per axis, the flip and the crop box: an axis-aligned affine map from the view to the slice
        coverage = torch.ones_like(view[..., 0])
        grid = []
        # the grid's axis 0 is x (columns: axis 1 of the parameters), its axis 1 is y (rows: axis 0)
        for axis, (view_side, image_side) in enumerate([(width, images.shape[3]), (height, images.shape[2])]):
            position = view[..., axis]
            # the view's pixels cover [-0.5, side - 0.5]: bilinear zero padding weighs a position by its overlap
            pixel = (position + 1) * view_side / 2 - 0.5
            coverage = coverage * (1 + pixel).clamp(0, 1) * (view_side - pixel).clamp(0, 1)
            size, corner = (params[key][:, 1 - axis].to(dtype)[:, None, None] for key in ("crop_size", "crop_corner"))
            sign = 1 - 2 * params["flip"][:, 1 - axis].to(dtype)[:, None, None]
            source = sign * position * size / image_side + (2 * corner + size) / image_side - 1
            # Resized (F.interpolate) clamps its source positions to the crop box's pixel centres
            first, last = (2 * corner + 1) / image_side - 1, (2 * (corner + size) - 1) / image_side - 1
            grid.append(torch.minimum(torch.maximum(source, first), last))
        grid = torch.stack(grid, dim=-1)
        out = F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        return out * coverage[:, None]

    def _blur(self, images: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        """MONAI's ``GaussianFilter`` (erf kernel, zero padding) with one sigma per view and spatial axis."""
        num, channels, height, width = images.shape
        radius = self.blur_radius
        taps = torch.arange(-radius, radius + 1, dtype=images.dtype, device=images.device)
        t = 0.70710678 / sigma.to(images.dtype)[..., None]  # (N, 2, 1)
        kernels = (0.5 * ((t * (taps + 0.5)).erf() - (t * (taps - 0.5)).erf())).clamp(min=0)  # (N, 2, K)
        kernels = kernels.repeat_interleave(channels, dim=0)  # one group per view and channel
        flat = images.reshape(1, num * channels, height, width)
        flat = F.conv2d(flat, kernels[:, 0, None, :, None], padding=(radius, 0), groups=num * channels)
        flat = F.conv2d(flat, kernels[:, 1, None, None, :], padding=(0, radius), groups=num * channels)
        return flat.reshape(num, channels, height, width)

    def apply(self, images: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """
        Apply drawn parameters (:py:meth:`randomize`) to a batch.

        Args:
            images: ``(N, C, H, W)`` slices, one per set of parameters.
            params: the parameters of ``N`` views, on the images' device.

        Returns:
            the ``(N, C, *spatial_size)`` views, of the images' dtype.
        """
        dtype = images.dtype

        def per_view(name: str) -> torch.Tensor:
            return params[name].to(dtype)[:, None, None, None]

        x = self._geometry(images, params)
        low = x.amin(dim=(1, 2, 3), keepdim=True)
        span = x.amax(dim=(1, 2, 3), keepdim=True) - low
        contrast = ((x - low) / (span + _GAMMA_EPS)) ** per_view("gamma") * span + low
        x = torch.where(params["do_gamma"][:, None, None, None], contrast, x)
        x = x * (1 + per_view("scale"))
        x = x + per_view("shift") * x.std(dim=(1, 2, 3), correction=0, keepdim=True)
        x = x + params["noise_field"] * (per_view("noise") * x.std(dim=(2, 3), keepdim=True))
        return torch.where(params["do_blur"][:, None, None, None], self._blur(x, params["blur_sigma"]), x)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """
        Args:
            images: un-augmented channel-first slices ``(B, C, H, W)``, on any device, of a floating dtype.

        Returns:
            ``num_views`` tensors ``(B, C, *spatial_size)``, each an independent view of every slice, on the
            images' device and of their dtype.

        Raises:
            ValueError: ``images`` is not a batch of channel-first 2D slices.
        """
        if images.ndim != 4:
            raise ValueError(f"expected channel-first 2D slices (B, C, H, W), got shape {tuple(images.shape)}.")
        stacked = images.repeat(self.num_views, 1, 1, 1)  # view k of slice b is row k * B + b
        return self.apply(stacked, self.randomize(stacked)).split(images.shape[0])
