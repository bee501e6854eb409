"""Every bundle's metadata conforms to the schema it declares (checked offline), and its ``network_def`` takes
and returns what ``network_data_format`` says (MONAI's ``verify_net_in_out``): a 3D model on 3D volumes, built
from the fine-tuned 2D BasicUNet's weights."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from monai.bundle import ConfigParser, verify_net_in_out

import gcl_monai

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
BUNDLES = sorted(p.name for p in (REPO / "bundles").iterdir() if (p / "configs" / "metadata.json").is_file())

SCHEMA = "https://github.com/Project-MONAI/MONAI-extra-test-data/releases/download/0.8.1/meta_schema_20240725.json"
#: the keys the 20240725 schema requires (MONAI 1.6's default metadata writes the same ones).
REQUIRED = (
    "version",
    "changelog",
    "monai_version",
    "pytorch_version",
    "numpy_version",
    "required_packages_version",
    "task",
    "description",
    "authors",
    "copyright",
    "network_data_format",
)
TENSOR_KEYS = (
    "type",
    "format",
    "num_channels",
    "spatial_shape",
    "dtype",
    "value_range",
    "is_patch_data",
    "channel_def",
)


def _configs(bundle: str) -> Path:
    return REPO / "bundles" / bundle / "configs"


def _inference(bundle: str) -> ConfigParser:
    parser = ConfigParser()
    parser.read_config(str(_configs(bundle) / "inference.json"))
    return parser


def test_all_bundles_are_checked():
    assert BUNDLES == ["gcl_acdc", "gcl_demo", "gcl_dicom", "gcl_mmwhs", "gcl_prostate"]


@pytest.mark.parametrize("bundle", BUNDLES)
def test_metadata_conforms_to_its_schema(bundle):
    meta = json.loads((_configs(bundle) / "metadata.json").read_text())
    assert meta["schema"] == SCHEMA
    missing = [k for k in REQUIRED if k not in meta]
    assert not missing, f"{bundle}: metadata lacks {missing} required by {SCHEMA}"
    assert meta["version"] in meta["changelog"]
    assert meta["required_packages_version"]["gcl-monai"] == gcl_monai.__version__
    assert "eval_metrics" not in meta  # only measured values belong there; results live in docs/results
    inference = _inference(bundle)
    fmt = meta["network_data_format"]
    (image,), (pred,) = fmt["inputs"].values(), fmt["outputs"].values()
    for tensor in (image, pred):
        assert [k for k in TENSOR_KEYS if k not in tensor] == []
        assert tensor["num_channels"] == len(tensor["channel_def"])
        assert len(tensor["spatial_shape"]) == 3  # MONAI Label reads a 3D model from this
    assert image["spatial_shape"] == [*inference["image_size"], "*"] == pred["spatial_shape"]
    assert pred["num_channels"] == inference["num_classes"]
    assert pred["value_range"] == []  # logits; softmax and argmax are post-processing
    classes = [c.split(" ", 1)[1] for c in meta["pred_classes"].split(", ")]
    assert classes == [pred["channel_def"][str(i)] for i in range(pred["num_channels"])]


@pytest.mark.parametrize("bundle", BUNDLES)
def test_verify_net_in_out(bundle):
    configs = _configs(bundle)
    verify_net_in_out(
        net_id="network_def",
        meta_file=str(configs / "metadata.json"),
        config_file=str(configs / "inference.json"),
        device="cpu",
        any=3,
    )


def test_verify_net_in_out_command_line():
    """The command of the bundle card, as a user runs it."""
    configs = _configs("gcl_demo")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "monai.bundle",
            "verify_net_in_out",
            "network_def",
            "--meta_file",
            str(configs / "metadata.json"),
            "--config_file",
            str(configs / "inference.json"),
            "--device",
            "cpu",
        ],
        check=True,
        cwd=REPO,
        capture_output=True,
    )


@pytest.mark.parametrize("bundle", BUNDLES)
def test_inference_network_loads_the_fine_tuned_weights(bundle):
    """The ``model.pt`` of the fine-tuning (train.json's 2D ``network_def``) loads strictly into inference.json's
    ``network_def``, which segments a volume exactly as the 2D network segments each of its slices."""
    train = ConfigParser()
    train.read_config(str(_configs(bundle) / "train.json"))
    train["features"] = [8, 8, 16, 16, 32, 8]
    inference = _inference(bundle)
    inference["features"] = [8, 8, 16, 16, 32, 8]
    torch.manual_seed(0)
    net2d = train.get_parsed_content("network_def").eval()
    net3d = inference.get_parsed_content("network_def").eval()
    net3d.load_state_dict(net2d.state_dict(), strict=True)
    volume = torch.rand(1, 1, 32, 32, 3)
    with torch.no_grad():
        expected = torch.stack([net2d(volume[..., k]) for k in range(3)], dim=-1)
        assert torch.allclose(net3d(volume), expected, atol=1e-5)  # a batch of 3 slices vs one at a time
        # a batch of slices, as SliceInferer passes it
        assert torch.equal(net3d(volume[..., 1]), net2d(volume[..., 1]))  # a batch of slices, as SliceInferer passes
