"""The paper's Fig. 4 (``experiments.tsne``): the embedding of slices, the figure's layout, and the command on a
pre-training of the phantom."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from experiments import tsne
from experiments.__main__ import main
from experiments.tsne import embed_slices, plot_tsne


class _Linear(torch.nn.Module):
    """A network whose image-wise output is a fixed linear map of the flattened slice."""

    def __init__(self, pixels: int, dim: int = 3):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(pixels, dim, generator=torch.Generator().manual_seed(0)))

    def forward(self, images: torch.Tensor) -> dict:
        return {"img": images.flatten(1) @ self.weight}


def test_embedding_is_the_normalised_image_output_in_any_batch_size():
    rng = np.random.default_rng(0)
    dataset = [{"image": rng.normal(size=(1, 4, 4)).astype(np.float32)} for _ in range(7)]
    network = _Linear(16)
    indices = [6, 0, 3, 5, 1]

    embedding = embed_slices(network, dataset, indices, batch_size=2)

    expected = torch.stack([network(torch.as_tensor(dataset[i]["image"])[None])["img"][0] for i in indices])
    expected = (expected / expected.norm(dim=1, keepdim=True)).detach().numpy()
    assert embedding.shape == (5, 3)
    np.testing.assert_allclose(embedding, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(embedding, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(embed_slices(network, dataset, indices, batch_size=64), embedding, rtol=1e-6)


def test_figure_has_a_row_per_method_and_a_column_per_meta_label(tmp_path):
    rng = np.random.default_rng(0)
    points = {"simclr": rng.normal(size=(30, 2)), "gcl": rng.normal(size=(30, 2))}
    labels = {"patient_id": rng.integers(0, 12, 30), "slice_quantile": rng.integers(0, 4, 30), "organ": np.ones(30)}

    path = plot_tsne(points, labels, tmp_path / "tsne.png")

    with Image.open(path) as image:  # 4 inches per panel at 120 dpi
        assert image.size == (3 * 4 * 120, 2 * 4 * 120)


@pytest.mark.slow
def test_tsne_command_embeds_the_pretraining_slices_without_their_labels(tmp_path, monkeypatch):
    tiny = ["--image-size", "32", "--features", "4", "4", "8", "8", "16", "4"]
    run = ["--data", "demo", "--results-dir", str(tmp_path), "--name", "fig4", "--methods", "simclr", *tiny]
    assert main([*run, "--num-labeled", "1", "--pretrain-epochs", "1", "--finetune-iterations", "2"]) == 0
    seen = []
    dataset = tsne.SliceDataset

    def slices(entries, transforms):
        seen.extend(entries)
        return dataset(entries, transforms)

    monkeypatch.setattr(tsne, "SliceDataset", slices)

    argv = ["tsne", "--results-dir", str(tmp_path), "--name", "fig4", "--methods", "simclr", "--max-points", "40"]
    assert main(argv) == 0

    with Image.open(tmp_path / "fig4" / "tsne.png") as image:  # one method, the phantom's three meta labels
        assert image.size == (3 * 4 * 120, 4 * 120)
    assert seen and all("image" in entry and "label" not in entry for entry in seen)
