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
from gcl_monai.data import MMWHS_LABEL_NAMES, MMWHS_LABEL_VALUES

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


#: the words a class name abbreviates, to read it against the metadata's ``channel_def``
ABBREVIATIONS = {
    "rv": "right ventricle",
    "lv": "left ventricle",
    "ra": "right atrium",
    "la": "left atrium",
    "blood": "blood cavity",
}
#: the meta labels a bundle's ``pretrain.json`` can name by default (the DICOM bundle's ``cardiac_phase`` included)
META_LABELS = ("patient_id", "slice_quantile", "organ_state", "cardiac_phase")


def _config(bundle: str, name: str) -> dict:
    return json.loads((_configs(bundle) / f"{name}.json").read_text())


def _spelled(class_name: str) -> str:
    """``"la_blood"`` -> ``"left atrium blood cavity"``: a config's class name in the words of ``channel_def``."""
    return " ".join(ABBREVIATIONS.get(w, w) for w in class_name.split("_"))


@pytest.mark.parametrize("bundle", BUNDLES)
def test_channel_def_names_the_classes_of_every_workflow(bundle):
    """The classes a user and MONAI Label read in the metadata are, one by one, those that fine-tuning, evaluation,
    inference and the pre-training's probe name (``class_names``, ``probe_class_names``)."""
    meta = json.loads((_configs(bundle) / "metadata.json").read_text())
    channel_def = meta["network_data_format"]["outputs"]["pred"]["channel_def"]
    classes = _config(bundle, "train")["class_names"]
    assert _config(bundle, "inference")["class_names"] == classes == _config(bundle, "pretrain")["probe_class_names"]
    assert [channel_def[str(i)] for i in range(len(channel_def))] == ["background", *map(_spelled, classes)]


@pytest.mark.parametrize("bundle", BUNDLES)
def test_description_states_the_bundles_meta_labels_and_modality(bundle):
    """The description names exactly the meta labels the bundle pre-trains with, and the modality of its input
    (a CT bundle describes no MRI)."""
    meta = json.loads((_configs(bundle) / "metadata.json").read_text())
    named = {m for m in META_LABELS if m in meta["description"].lower()}
    assert named == set(_config(bundle, "pretrain")["meta_labels"]), meta["description"]
    text = f"{meta['description']} {meta['image_classes']}"
    modality = meta["network_data_format"]["inputs"]["image"]["modality"]
    assert modality in text
    if modality == "CT":
        assert "MRI" not in text


def test_mmwhs_classes_follow_the_challenge_label_values():
    """MM-WHS numbers 205 LV myocardium, 420 left atrium, 500 LV blood cavity, 550 right atrium, 600 RV blood cavity,
    820 ascending aorta and 850 pulmonary artery (Zhuang et al., Medical Image Analysis 2019); the bundle maps them to
    classes 1-7 in that order and names them so (before 0.3.0 it called 550 the right ventricle and 600 the right
    atrium)."""
    train = _config("gcl_mmwhs", "train")
    assert train["label_map"] == {str(v): i for i, v in enumerate(MMWHS_LABEL_VALUES, start=1)}
    assert [MMWHS_LABEL_NAMES[i] for i in range(1, 8)] == ["Myo", "LA", "LV", "RA", "RV", "AA", "PA"]
    expected = ["lv_myocardium", "la_blood", "lv_blood", "ra_blood", "rv_blood", "ascending_aorta", "pulmonary_artery"]
    assert train["class_names"] == expected


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
