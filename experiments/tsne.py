"""
The paper's Fig. 4: t-SNE of the image-wise representations (GCLNet's ``img`` output) of the pre-training slices,
one row per pre-trained method and one column per meta label, points coloured by that meta label.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from monai.bundle import ConfigParser

from experiments.plan import read_plan
from gcl_monai.data import SliceDataset, without_labels
from gcl_monai.handlers import latest_checkpoint
from gcl_monai.utils import save_figure

__all__ = ["embed_slices", "load_pretrained", "plot_tsne", "run_tsne"]

logger = logging.getLogger("experiments")


def _parser(run: Mapping[str, Any]) -> ConfigParser:
    parser = ConfigParser()
    parser.read_config(str(Path(run["bundle"]) / "configs" / "pretrain.json"))
    parser.update(dict(run["overrides"]))
    return parser


def load_pretrained(parser: ConfigParser) -> torch.nn.Module:
    """The pre-training network (the bundle's ``network_def``, on the CPU) with the run's last checkpoint loaded.

    Raises:
        FileNotFoundError: the run has no checkpoint.
    """
    folder = parser.get_parsed_content("pretrain_dir")
    checkpoint = latest_checkpoint(folder)
    if checkpoint is None:
        raise FileNotFoundError(f"no pre-training checkpoint in {folder}: run the benchmark first.")
    network = parser.get_parsed_content("network_def")
    network.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True)["network"])
    logger.info("Loaded %s.", checkpoint)
    return network.eval()


@torch.no_grad()
def embed_slices(
    network: torch.nn.Module, dataset: SliceDataset, indices: Sequence[int], batch_size: int = 64
) -> np.ndarray:
    """L2-normalised image-wise representations ``img`` of ``dataset[indices]``, shape (len(indices), D)."""
    out = []
    for start in range(0, len(indices), batch_size):
        images = torch.stack(
            [torch.as_tensor(dataset[i]["image"]).float() for i in indices[start : start + batch_size]]
        )
        out.append(torch.nn.functional.normalize(network(images)["img"], dim=1).numpy())
    return np.concatenate(out)


def plot_tsne(points: Mapping[str, np.ndarray], labels: Mapping[str, np.ndarray], path: Path) -> Path:
    """
    One row per method (``points``: method -> (N, 2) t-SNE coordinates), one column per meta label (``labels``:
    name -> (N,) integer labels of the same points).
    """
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4 * len(labels), 4 * len(points)), layout="constrained")
    for i, (method, xy) in enumerate(points.items()):
        for j, (name, values) in enumerate(labels.items()):
            ax = fig.add_subplot(len(points), len(labels), i * len(labels) + j + 1)
            classes = np.unique(values)
            cmap = colormaps["tab10" if len(classes) <= 10 else "tab20"]
            for k, value in enumerate(classes):
                chosen = values == value
                ax.scatter(xy[chosen, 0], xy[chosen, 1], s=4, color=cmap(k % cmap.N), label=str(value))
            if len(classes) <= 10:
                ax.legend(fontsize="x-small", markerscale=2, title=name, title_fontsize="x-small")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{method}: coloured by {name} ({len(classes)} classes)", fontsize="small")
    save_figure(fig, path, dpi=120)
    return path


def run_tsne(
    folder: str | Path, methods: Sequence[str], max_points: int = 1000, seed: int = 0, perplexity: float = 30.0
) -> Path:
    """
    Embeds the same (sub-sampled) pre-training slices with each method's pre-trained network, runs scikit-learn's
    t-SNE per method and writes ``<folder>/tsne.png``.

    Args:
        folder: the experiment folder (with ``plan.json``); run from the directory the benchmark was run from.
        methods: pre-trained methods of the experiment, one row each.
        max_points: slices to embed (a seeded random subset when there are more).
        seed: seed of the subset and of t-SNE.
        perplexity: t-SNE perplexity.

    Raises:
        ValueError: a method was not pre-trained in this experiment.
    """
    from sklearn.manifold import TSNE

    folder = Path(folder)
    plan = read_plan(folder)
    missing = [m for m in methods if m not in plan["pretrain"]]
    if missing:
        raise ValueError(f"{missing} not pre-trained in {folder}; pre-trained there: {list(plan['pretrain'])}.")
    first = _parser(plan["pretrain"][methods[0]])
    slices = without_labels(first.get_parsed_content("split")["pretrain"])  # as the pre-training saw them
    dataset = SliceDataset(slices, first.get_parsed_content("train#volume_transforms"))
    count = min(max_points, len(dataset))
    indices = np.sort(np.random.default_rng(seed).choice(len(dataset), size=count, replace=False))
    meta = json.loads((Path(plan["pretrain"][methods[0]]["bundle"]) / "configs" / "pretrain.json").read_text())
    labels = {m: np.array([getattr(dataset.slice_table[i], m) for i in indices]) for m in meta["meta_labels"]}
    points = {}
    for method in methods:
        embedding = embed_slices(load_pretrained(_parser(plan["pretrain"][method])), dataset, indices)
        logger.info("t-SNE of %d slices for %s.", count, method)
        tsne = TSNE(n_components=2, perplexity=min(perplexity, count - 1), init="pca", random_state=seed)
        points[method] = tsne.fit_transform(embedding)
    path = plot_tsne(points, labels, folder / "tsne.png")
    logger.info("t-SNE figure written to %s.", path)
    return path
