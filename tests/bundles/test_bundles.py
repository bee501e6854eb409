"""Bundles: structure, consistency across datasets, and end-to-end runs of gcl_demo on tiny synthetic data."""

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch
from ignite.engine import Events
from monai.bundle import ConfigParser, ConfigWorkflow
from monai.networks.nets import BasicUNet
from monai.transforms import LoadImage
from torch.utils._python_dispatch import TorchDispatchMode

from experiments.report import read_scalars

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
BUNDLES = ["gcl_demo", "gcl_acdc", "gcl_prostate", "gcl_mmwhs", "gcl_dicom"]
DEMO = REPO / "bundles" / "gcl_demo" / "configs"
ACDC = REPO / "bundles" / "gcl_acdc" / "configs"
TINY = {
    "num_patients": 6,
    "num_pretrain": 2,
    "num_val": 1,
    "num_test": 1,
    "image_size": [32, 32],
    "features": [4, 4, 8, 8, 16, 4],
    "batch_size": 4,
    "epochs": 1,
}
TINY_FT = {**TINY, "iterations_per_epoch": 3, "init": "gcl"}


#: the configs of each run, in order: evaluate.json is an overlay on train.json
STACKS = {"evaluate.json": ["train.json", "evaluate.json"]}


def _run(config, run_id, bundle_root, **override):
    files = [str(DEMO / name) for name in STACKS.get(config, [config])]
    wf = ConfigWorkflow(config_file=files, workflow_type=None, bundle_root=str(bundle_root), run_id=run_id, **override)
    wf.initialize()
    wf.run()
    wf.finalize()
    return wf


@pytest.mark.parametrize("bundle", BUNDLES)
def test_bundle_layout_and_metadata(bundle):
    configs = REPO / "bundles" / bundle / "configs"
    for name in ["metadata.json", "pretrain.json", "train.json", "evaluate.json", "inference.json", "logging.conf"]:
        assert (configs / name).is_file(), name
    assert (REPO / "bundles" / bundle / "LICENSE").is_file()
    card = (REPO / "bundles" / bundle / "docs" / "README.md").read_text()
    # the card travels with a copied bundle: it names every recipe overlay the bundle ships
    assert [r.name for r in sorted((configs / "recipes").glob("*.json")) if f"`{r.name}`" not in card] == []
    meta = json.loads((configs / "metadata.json").read_text())  # its required keys: test_bundle_metadata.py
    fmt = meta["network_data_format"]
    assert list(fmt["inputs"])[0] == "image" and list(fmt["outputs"])[0] == "pred"
    assert fmt["inputs"]["image"]["spatial_shape"][-1] == "*"
    inference = json.loads((configs / "inference.json").read_text())
    assert fmt["outputs"]["pred"]["num_channels"] == inference["num_classes"]
    for key in ["network_def", "preprocessing", "inferer", "postprocessing", "device", "bundle_root"]:
        assert key in inference, key
    # MONAI components, plus the few of gcl_monai that make a 2D network a 3D model, guard its input, choose the
    # field of view's crop and the largest-component clean-up (each returning MONAI transforms), stack a DICOM series
    # by position and write DICOM SEG, find the bundle's folder, lay out the weights (channels_last), and refuse an
    # unknown pred_interp or a switch that is not a boolean
    imports = {"gcl_monai.bundle", "gcl_monai.data", "gcl_monai.engines", "gcl_monai.transforms"}
    used = set(re.findall(r"gcl_monai(?:\.\w+)+", json.dumps(inference))) - imports
    assert used == {
        "gcl_monai.bundle.default_device",
        "gcl_monai.bundle.bundle_folder",
        "gcl_monai.bundle.check_choice",
        "gcl_monai.bundle.check_switches",
        "gcl_monai.bundle.memory_format",
        "gcl_monai.transforms.PRED_INTERPS",
        "gcl_monai.networks.SliceWise",
        "gcl_monai.transforms.SelectFramed",
        "gcl_monai.transforms.RepairNonFinited",
        "gcl_monai.transforms.field_of_view_crop",
        "gcl_monai.transforms.in_plane_grid",
        "gcl_monai.transforms.keep_largest_component",
        "gcl_monai.transforms.PositionSortedPydicomReader",
        "gcl_monai.transforms.SaveDicomSegd",
        "gcl_monai.data.inference_datalist",
        "gcl_monai.engines.segment_each_case",
        "gcl_monai.engines.MirroredInferer",
    }
    assert "gcl-monai" in meta["required_packages_version"]


@pytest.mark.parametrize("bundle", BUNDLES)
def test_pretraining_sees_the_field_of_view_of_fine_tuning(bundle):
    """The encoder is pre-trained on the same in-plane crop that fine-tuning, evaluation and inference use."""
    configs = REPO / "bundles" / bundle / "configs"
    for key in ("fov_scale", "fov_shape"):
        fov = {
            name: ConfigParser.load_config_files([str(configs / n) for n in STACKS.get(name, [name])])[key]
            for name in ("pretrain.json", "train.json", "evaluate.json", "inference.json")
        }
        assert len(set(fov.values())) == 1, fov
    pretrain = json.loads((configs / "pretrain.json").read_text())
    (crop,) = [
        step for step in pretrain["volume_transforms"] if step["_target_"] == "gcl_monai.transforms.field_of_view_crop"
    ]
    assert crop["fov_scale"] == "@fov_scale" and crop["fov_shape"] == "@fov_shape"
    parser = ConfigWorkflow(config_file=str(configs / "pretrain.json"), workflow_type=None, fov_scale=0.5).parser
    transform = parser.get_parsed_content("train#volume_transforms", instantiate=True)
    crops = [t for t in transform.transforms if type(t).__name__ == "CenterScaleCropd"]
    assert len(crops) == 1 and list(crops[0].cropper.roi_scale)[:2] == [0.5, 0.5]
    overrides = {"fov_scale": 0.5, "fov_shape": "square"}
    parser = ConfigWorkflow(config_file=str(configs / "inference.json"), workflow_type=None, **overrides).parser
    transform = parser.get_parsed_content("preprocessing", instantiate=True)
    crops = [t for t in transform.transforms if type(t).__name__ == "CenterSquareCropd"]
    assert len(crops) == 1 and crops[0].cropper.roi_scale == 0.5 and crops[0].cropper.plane_axes == (0, 1)


def _messages(error: BaseException) -> list[str]:
    """The messages of an error and of its causes (MONAI wraps a component's error in "Failed to ...")."""
    messages = []
    while error is not None:
        messages.append(str(error))
        error = error.__cause__
    return messages


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory):
    """Pre-train (GCL), fine-tune (L=1) and evaluate once on a tiny phantom."""
    root = tmp_path_factory.mktemp("gcl_demo")
    _run("pretrain.json", "pretrain", root, **TINY)
    _run("train.json", "run", root, **TINY_FT)
    released = (root / "models" / "model.pt").stat().st_mtime_ns
    _run("evaluate.json", "run", root, **TINY_FT)
    # on top of train.json, the evaluation neither trains nor releases a model (train.json's finalize)
    assert (root / "models" / "model.pt").stat().st_mtime_ns == released
    return root


def test_pretrain_finetune_evaluate(demo_root):
    work = demo_root / "outputs"
    encoder = torch.load(work / "pretrain" / "gcl" / "encoder.pt", weights_only=True)
    assert encoder and all(k.startswith(("conv_0.", "down_")) for k in encoder)
    assert list((work / "pretrain" / "gcl").glob("checkpoint*epoch=1.pt"))
    summary = json.loads((work / "finetune" / "gcl_L1_d0_s0" / "eval" / "dice.json").read_text())
    assert 0.0 <= summary["dice"] <= 1.0 and summary["num_volumes"] == 2  # one test patient, ED + ES
    assert set(summary["dice_per_class"]) == {"rv", "myocardium", "lv"}
    # the evaluation variants beside the primary figure: the ED volume alone, and the Dice pooled over the slices
    ed = [v["dice"] for v in summary["per_volume"] if v["organ_state"] == 0]
    assert summary["num_volumes_ed"] == 1 and summary["dice_ed"] == pytest.approx(ed[0])
    assert 0.0 <= summary["dice_pooled_2d"] <= 1.0
    assert (demo_root / "models" / "model.pt").is_file()
    # the validation Dice of every epoch is in TensorBoard beside the training loss
    scalars = read_scalars(work / "finetune" / "gcl_L1_d0_s0" / "tensorboard")
    assert {"train_loss", "val_mean_dice"} <= set(scalars)
    assert len(scalars["val_mean_dice"][1]) == TINY_FT["epochs"] and 0 <= scalars["val_mean_dice"][1][0] <= 1


def test_fine_tuning_starts_from_a_kept_encoder_card(demo_root, tmp_path):
    """``--pretrained_path <card>.json``: the kept (bfloat16) encoder is restored in float32 and loaded; with a
    learning rate of 0 the fine-tuned encoder's convolutions are the restored weights exactly."""
    from gcl_monai.networks import keep_encoder, restore_encoder

    keep_encoder(demo_root / "outputs" / "pretrain" / "gcl" / "encoder.pt", tmp_path / "gcl.pt", recipe="gcl")
    wf = _run("train.json", "run", demo_root, **{**TINY_FT, "pretrained_path": str(tmp_path / "gcl.json"), "lr": 0.0})
    restored = restore_encoder(tmp_path / "gcl.json")
    trained = wf.parser.get_parsed_content("network").state_dict()
    for key in ("conv_0.conv_0.conv.weight", "down_4.convs.conv_1.conv.weight"):
        assert torch.equal(trained[key], restored[key])
    wrong = {**TINY_FT, "pretrained_path": str(tmp_path / "gcl.json"), "features": [8, 8, 16, 16, 32, 8]}
    with pytest.raises(RuntimeError) as raised:
        _run("train.json", "run", demo_root, **wrong)
    assert any("gcl.json: features [4, 4, 8, 8, 16] of the encoder" in m for m in _messages(raised.value))


@pytest.mark.parametrize("pred_interp", ["nearest", "bilinear"])
def test_dice_in_the_input_grid(demo_root, pred_interp):
    """``dice_grid="input"``: the prediction inverted through the crop and the resize (as a label map or as class
    probabilities, ``pred_interp``), scored against the label as loaded; the Dice in the network's grid (the
    default) stays as it was."""
    eval_dir = demo_root / "outputs" / f"eval_input_grid_{pred_interp}"
    run = {**TINY_FT, "dice_grid": "input", "pred_interp": pred_interp}
    wf = _run("evaluate.json", "run", demo_root, **run, eval_dir=str(eval_dir))
    evaluator = wf.parser.get_parsed_content("evaluate#evaluator")
    item = wf.parser.get_parsed_content("test_data")[-1]
    label = LoadImage(image_only=True, ensure_channel_first=True)(item["label"])
    out = evaluator.state.output[0]  # the last volume
    assert out["pred"].shape == out["label"].shape == (4, *label.shape[1:])  # one-hot, the file's own grid
    np.testing.assert_array_equal(np.asarray(out["label"].argmax(0)), np.asarray(label[0]))
    pred, truth = np.asarray(out["pred"][1:]).astype(bool), np.asarray(out["label"][1:]).astype(bool)
    per_class = []
    for p, t in zip(pred, truth):
        total = p.sum() + t.sum()
        per_class.append(2 * (p & t).sum() / total if total else np.nan)
    summary = json.loads((eval_dir / "dice.json").read_text())
    np.testing.assert_allclose(summary["per_volume"][-1]["dice"], np.nanmean(per_class), rtol=1e-5)
    network = json.loads((demo_root / "outputs" / "finetune" / "gcl_L1_d0_s0" / "eval" / "dice.json").read_text())
    assert summary["num_volumes"] == network["num_volumes"] and summary["dice"] != network["dice"]
    with pytest.raises(Exception) as raised:
        _run("evaluate.json", "run", demo_root, **TINY_FT, dice_grid="pixels", eval_dir=str(eval_dir))
    messages = _messages(raised.value)
    assert any("dice_grid must be one of ('network', 'input'), got 'pixels'" in m for m in messages)


def test_keep_largest_component_in_evaluation_validation_and_inference(demo_root, tmp_path):
    """``keep_largest_component``: the evaluated prediction has one 3D component per class at most; the validation of
    fine-tuning and the inference bundle carry the same step; an unknown value is refused by name."""
    from monai.bundle import ConfigParser
    from monai.transforms import KeepLargestConnectedComponentd
    from skimage.measure import label as components

    eval_dir = tmp_path / "eval_lcc"
    wf = _run("evaluate.json", "run", demo_root, **TINY_FT, keep_largest_component="class", eval_dir=str(eval_dir))
    for out in wf.parser.get_parsed_content("evaluate#evaluator").state.output:
        for channel in np.asarray(out["pred"][1:]).astype(bool):
            assert components(channel, connectivity=3).max() <= 1
    assert json.loads((eval_dir / "dice.json").read_text())["num_volumes"] == 2
    for config, key in (("train.json", "validate#postprocessing"), ("inference.json", "postprocessing")):
        parser = ConfigParser()
        parser.read_config(str(DEMO / config))
        parser["keep_largest_component"] = "foreground"
        flat = parser.get_parsed_content(key).flatten().transforms  # inference's export is a Compose in the list
        steps = [t for t in flat if isinstance(t, KeepLargestConnectedComponentd)]
        assert len(steps) == 1 and steps[0].converter.independent is False
        assert list(steps[0].converter.applied_labels) == [1, 2, 3]
    with pytest.raises(Exception) as raised:
        _run("evaluate.json", "run", demo_root, **TINY_FT, keep_largest_component="largest", eval_dir=str(eval_dir))
    messages = _messages(raised.value)
    assert any(
        "keep_largest_component must be False, None or one of ('class', 'foreground'), got 'largest'" in m
        for m in messages
    )


def test_augmentation_and_dice_switches_reach_the_fine_tuning():
    """``rotate_degrees``, ``scale_range``, ``affine_prob`` set the labelled slices' affine (and the unlabelled
    slices' of semi-supervised fine-tuning); ``dice_batch`` the Dice loss's reduction over the batch."""
    import math

    from monai.bundle import ConfigParser
    from monai.transforms import RandAffined

    parser = ConfigParser()
    parser.read_config(str(DEMO / "train.json"))
    parser.update({"rotate_degrees": 30.0, "scale_range": 0.25, "affine_prob": 0.8, "dice_batch": True})
    for key in ("train#preprocessing", "train#unlabeled_dataset#transform"):
        (affine,) = [t for t in parser.get_parsed_content(key).transforms if isinstance(t, RandAffined)]
        assert affine.prob == 0.8
        grid = affine.rand_affine.rand_affine_grid
        assert grid.rotate_range == (math.radians(30.0),) and grid.scale_range == (0.25, 0.25)
    assert parser.get_parsed_content("loss").dice.batch is True


def _jacobian_determinants(mapped: torch.Tensor) -> torch.Tensor:
    """Forward differences of a sampled coordinate map ``(2, H, W)`` (row, column): the determinant of the
    deformation's Jacobian at each pixel away from the border (padding clamps the border)."""
    d_row, d_col = mapped[:, 1:, :-1] - mapped[:, :-1, :-1], mapped[:, :-1, 1:] - mapped[:, :-1, :-1]
    return (d_row[0] * d_col[1] - d_col[0] * d_row[1])[8:-8, 8:-8]


@pytest.mark.parametrize("config", [DEMO, ACDC])
def test_elastic_augmentation_is_free_of_folds_and_reaches_both_paths(config):
    """``elastic_prob`` switches on MONAI's ``Rand2DElasticd`` after the affine, for the labelled slices (label
    resampled nearest) and the unlabelled ones; at the bundles' spacing and magnitude the deformation never folds:
    warping a map of each pixel's own coordinates, the Jacobian determinant stays positive over 200 draws at the
    bundle's image size (measured minimum 0.28 at 128 x 128). A magnitude 4 times larger folds (the check can fail)."""
    from monai.bundle import ConfigParser
    from monai.transforms import Rand2DElasticd

    parser = ConfigParser()
    parser.read_config(str(config / "train.json"))
    assert parser["elastic_prob"] == 0.0  # off by default: the listed transform is disabled
    assert not [t for t in parser.get_parsed_content("train#preprocessing").transforms if isinstance(t, Rand2DElasticd)]
    parser.update({"elastic_prob": 1.0})
    elastic = {}
    for key in ("train#preprocessing", "train#unlabeled_dataset#transform"):
        (elastic[key],) = [t for t in parser.get_parsed_content(key).transforms if isinstance(t, Rand2DElasticd)]
    assert elastic["train#preprocessing"].mode == ("bilinear", "nearest")
    # one list for both paths, each its own instance; the unlabelled slices have no label to skip
    assert elastic["train#unlabeled_dataset#transform"] is not elastic["train#preprocessing"]
    assert all(t.allow_missing_keys for t in elastic.values())
    size = parser["image_size"]
    rows, cols = torch.meshgrid(*(torch.arange(n, dtype=torch.float32) for n in size), indexing="ij")
    coordinates = {"image": torch.stack([rows, cols]), "label": torch.zeros(1, *size)}

    def smallest_determinant(transform, draws):
        transform.set_random_state(0)
        return min(
            float(_jacobian_determinants(torch.as_tensor(transform(coordinates)["image"])).min()) for _ in range(draws)
        )

    bundled = elastic["train#preprocessing"]
    bundled.padding_mode = ("border", "border")  # the border clamps, zeros would pull 0 in
    assert smallest_determinant(bundled, 200) > 0.1
    lo, hi = parser["elastic_magnitude"]
    folding = Rand2DElasticd(
        ["image", "label"],
        spacing=parser["elastic_spacing"],
        magnitude_range=(4 * lo, 4 * hi),
        prob=1.0,
        padding_mode="border",
    )
    assert smallest_determinant(folding, 50) < 0


def test_elastic_augmentation_and_amp_fine_tune_the_phantom(demo_root):
    """``--elastic_prob 0.5 --amp True`` fine-tunes through the bundle: the trainer's forward runs in bfloat16
    (the loss stays float32), the labels stay labels after the nearest resampling, and the run saves a model."""
    wf = _run("train.json", "run", demo_root, **{**TINY_FT, "elastic_prob": 0.5, "amp": True})
    trainer = wf.parser.get_parsed_content("train#trainer")
    assert trainer.inferer.enabled and trainer.inferer.dtype == torch.bfloat16
    out = trainer.state.output[0]
    assert out["pred"].dtype == torch.float32 and torch.isfinite(torch.as_tensor(out["loss"]))
    assert set(torch.unique(torch.as_tensor(out["label"])).tolist()) <= {0.0, 1.0, 2.0, 3.0}
    assert (Path(wf.parser.get_parsed_content("output_dir")) / "model.pt").is_file()


def test_channels_last_fine_tunes_the_phantom_as_the_default_layout_does(demo_root):
    """``--channels_last True`` keeps the network's convolution weights channels-last (oneDNN's faster layout on the
    CPU, docs/finetuning.md) and changes only the order of float32 sums: the same seed's run ends with the default
    layout's loss to float32 rounding, and its kept model loads into a network of the default layout."""
    runs = {
        cl: _run("train.json", "run", demo_root, **{**TINY_FT, "channels_last": cl, "run_name": f"layout_{cl}"})
        for cl in (False, True)
    }
    weights = {
        cl: [p for p in wf.parser.get_parsed_content("network").parameters() if p.dim() == 4] for cl, wf in runs.items()
    }
    assert weights[True] and all(p.is_contiguous(memory_format=torch.channels_last) for p in weights[True])
    assert not all(p.is_contiguous() for p in weights[True]) and all(p.is_contiguous() for p in weights[False])
    loss = {cl: float(wf.parser.get_parsed_content("train#trainer").state.output[0]["loss"]) for cl, wf in runs.items()}
    assert loss[True] == pytest.approx(loss[False], rel=1e-4)
    kept = torch.load(Path(runs[True].parser.get_parsed_content("output_dir")) / "model.pt", weights_only=True)
    plain = runs[False].parser.get_parsed_content("network_def")
    plain.load_state_dict(kept)
    assert all(p.is_contiguous() for p in plain.parameters())


@pytest.mark.parametrize("config", ["train.json", "inference.json"])
def test_channels_last_must_be_a_boolean(config, tmp_path):
    wf = ConfigWorkflow(
        config_file=str(DEMO / config), workflow_type=None, bundle_root=str(tmp_path), channels_last="true"
    )
    with pytest.raises(RuntimeError) as raised:  # MONAI wraps what the initialize component raised
        wf.initialize()
    assert "channels_last='true'" in repr(raised.value) + repr(raised.value.__cause__)


@pytest.mark.parametrize(("semi_supervised", "init"), [("mean_teacher", "gcl"), ("mixup", "random"), ("vat", "gcl")])
def test_semi_supervised_switches_run_through_the_bundle(semi_supervised, init, demo_root):
    wf = _run("train.json", "run", demo_root, **{**TINY_FT, "init": init, "semi_supervised": semi_supervised})
    trainer = wf.parser.get_parsed_content("train#trainer")
    out = trainer.state.output[0]
    assert float(out["consistency_loss"]) > 0 and trainer.state.iteration == TINY_FT["iterations_per_epoch"]
    unlabeled = {d["patient"] for d in wf.parser.get_parsed_content("unlabeled")}
    labeled = {d["patient"] for d in wf.parser.get_parsed_content("labeled")}
    assert unlabeled and not unlabeled & labeled
    assert (trainer.teacher is not None) == (semi_supervised != "vat")


def test_labeled_pool_switch_draws_from_the_pretraining_patients_too(demo_root):
    def parsed(item, **override):
        wf = ConfigWorkflow(
            config_file=str(DEMO / "train.json"),
            workflow_type=None,
            bundle_root=str(demo_root),
            run_id="run",
            **{**TINY_FT, **override},
        )
        return wf.parser.get_parsed_content(item)

    split = parsed("split")
    train, pretrain = ({d["patient"] for d in split[k]} for k in ("train", "pretrain"))

    def drawn(**override):
        return set().union(*({d["patient"] for d in parsed("labeled", draw=k, **override)} for k in range(6)))

    assert drawn() <= train  # the default: the fine-tuning pool only
    both = drawn(labeled_pool="train+pretrain")
    assert both <= train | pretrain and both & pretrain  # the pre-training patients can be labelled now


def test_semi_supervised_switch_without_unlabelled_patients_fails_clearly(demo_root):
    only_pool = "$gcl_monai.data.unlabeled_subset(@split['train'], @labeled)"  # the pool has 2 patients
    with pytest.raises(RuntimeError) as error:  # the bundle's config error, raised from the ValueError
        _run(
            "train.json",
            "run",
            demo_root,
            **{**TINY_FT, "semi_supervised": "mean_teacher", "num_labeled": 2, "unlabeled": only_pool},
        )
    cause = error.value.__cause__ or error.value.__context__
    assert isinstance(cause, ValueError) and "no unlabelled slices left: all 2 training patients" in str(cause)


def test_finetune_starts_from_the_pretrained_encoder(demo_root):
    wf = ConfigWorkflow(
        config_file=str(DEMO / "train.json"), workflow_type=None, bundle_root=str(demo_root), run_id="run", **TINY_FT
    )
    wf.initialize()
    encoder = torch.load(demo_root / "outputs" / "pretrain" / "gcl" / "encoder.pt", weights_only=True)
    loader = next(h for h in wf.parser.get_parsed_content("train#handlers") if type(h).__name__ == "CheckpointLoader")
    net = wf.parser.get_parsed_content("network")
    loader(wf.parser.get_parsed_content("train#trainer"))
    for k, v in encoder.items():
        assert torch.equal(net.state_dict()[k], v), k


@pytest.mark.parametrize(
    ("override", "applied"),
    [
        ({}, False),
        ({"shrink_perturb": None}, False),
        ({"shrink_perturb": [0.5, 1.0]}, True),
        ({"shrink_perturb": [0.5, 1.0], "init": "random"}, False),
        ({"shrink_perturb": [0.5, 1.0], "freeze_encoder": True}, False),
    ],
)
def test_shrink_perturb_acts_after_loading_the_pretrained_encoder(override, applied, demo_root):
    """By default the loaded encoder is fine-tuned as it is (the paper's fine-tuning). With ``--shrink_perturb
    "[0.5, 1.0]"`` its convolution weights become 0.5 * w + 1.0 * w0 on STARTED, after the CheckpointLoader; random
    initialisation has nothing to shrink and a frozen encoder is evaluated as pre-trained."""
    wf = ConfigWorkflow(
        config_file=str(DEMO / "train.json"),
        workflow_type=None,
        bundle_root=str(demo_root),
        run_id="run",
        **{**TINY_FT, **override},
    )
    wf.initialize()
    trainer, net = wf.parser.get_parsed_content("train#trainer"), wf.parser.get_parsed_content("network")
    handlers = wf.parser.get_parsed_content("train#handlers")
    shrink = [h for h in handlers if type(h).__name__ == "ShrinkPerturb"]
    assert bool(shrink) == applied
    if not applied:
        return
    loader = next(h for h in handlers if type(h).__name__ == "CheckpointLoader")
    assert handlers.index(loader) < handlers.index(shrink[0])
    encoder = torch.load(demo_root / "outputs" / "pretrain" / "gcl" / "encoder.pt", weights_only=True)
    loader(trainer)
    shrink[0](trainer)
    torch.manual_seed(TINY_FT.get("seed", 0))
    fresh = BasicUNet(
        spatial_dims=2,
        in_channels=1,
        out_channels=4,
        features=TINY["features"],
        norm=wf.parser.get_parsed_content("norm"),
    ).state_dict()
    for key, value in encoder.items():
        expected = 0.5 * value + fresh[key] if key.endswith("conv.weight") else value
        torch.testing.assert_close(net.state_dict()[key], expected, rtol=0, atol=1e-6, msg=key)


def test_inference_writes_label_maps_with_the_input_geometry(demo_root, tmp_path):
    image = demo_root / "outputs" / "phantom" / "training" / "patient001" / "patient001_frame01.nii.gz"
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "case.nii.gz").symlink_to(image)
    _run(
        "inference.json",
        "run",
        demo_root,
        dataset_dir=str(tmp_path / "in"),
        output_dir=str(tmp_path / "out"),
        image_size=[32, 32],
        features=TINY["features"],
    )
    out = nib.load(str(next((tmp_path / "out").glob("*seg.nii.gz"))))
    ref = nib.load(str(image))
    assert out.shape == ref.shape
    np.testing.assert_allclose(out.affine, ref.affine, atol=1e-4)
    assert set(np.unique(np.asarray(out.dataobj))) <= {0, 1, 2, 3}


def test_evaluate_json_is_an_overlay_on_train_json(tmp_path):
    """``evaluate.json`` holds only what the evaluation changes in or adds to ``train.json``; stacked on it, its run
    is the evaluation alone (neither the training nor ``train.json``'s ``finalize``, which releases a model, runs);
    run alone, it stops at once with the command that stacks both."""
    for bundle in BUNDLES:
        configs = REPO / "bundles" / bundle / "configs"
        train, evaluate = (json.loads((configs / name).read_text()) for name in STACKS["evaluate.json"])
        assert not [k for k in evaluate if train.get(k) == evaluate[k]], bundle
        merged = ConfigParser.load_config_files([str(configs / name) for name in STACKS["evaluate.json"]])
        assert {k: merged[k] for k in ("initialize", "run")} == {k: evaluate[k] for k in ("initialize", "run")}
        assert merged["finalize"] == [] and merged["config_files"] == ["train.json", "evaluate.json"]
    alone = ConfigWorkflow(config_file=str(DEMO / "evaluate.json"), workflow_type=None, bundle_root=str(tmp_path))
    with pytest.raises(RuntimeError) as raised:
        alone.initialize()
    assert any(
        m.startswith("evaluate.json is an overlay on train.json")
        and "--config_file \"['configs/train.json','configs/evaluate.json']\"" in m
        for m in _messages(raised.value)
    )
    assert not list(tmp_path.iterdir())  # stopped before anything was written


def test_demo_chain_runs_the_three_workflows_on_its_own_budget(monkeypatch):
    """``demo.json`` runs pre-training, fine-tuning and evaluation in this order with the demo's shorter budget
    (about 3 minutes on 2 CPU cores); ``train.json`` keeps the dataset bundles' budget."""
    import monai.bundle
    from monai.bundle import ConfigParser

    calls = []
    monkeypatch.setattr(monai.bundle, "run", lambda run_id, **kwargs: calls.append((run_id, kwargs)))
    parser = ConfigParser()
    parser.read_config(str(DEMO / "demo.json"))
    parser.get_parsed_content("run")
    files = [(run_id, kw["config_file"]) for run_id, kw in calls]
    names = [(run_id, [Path(f).name for f in ([c] if isinstance(c, str) else c)]) for run_id, c in files]
    assert names == [
        ("pretrain", ["pretrain.json"]),
        ("run", ["train.json"]),
        ("run", ["train.json", "evaluate.json"]),  # evaluate.json is an overlay on train.json
    ]
    (_, pretrain), (_, finetune), (_, evaluate) = calls
    assert pretrain["method"] == finetune["init"] == evaluate["init"] == "gcl"
    assert finetune["num_labeled"] == evaluate["num_labeled"] == 1
    train = ConfigParser.load_config_file(str(DEMO / "train.json"))
    pretrain_defaults = ConfigParser.load_config_file(str(DEMO / "pretrain.json"))
    budget = finetune["epochs"] * finetune["iterations_per_epoch"]
    assert budget == 200 < train["epochs"] * train["iterations_per_epoch"]
    assert pretrain["epochs"] == 6 < pretrain_defaults["epochs"]


def _export(command: str, filepath: Path, demo_root: Path, *extra: str) -> None:
    """``python -m monai.bundle <command> network_def`` (``ckpt_export`` or ``onnx_export``) of the demo's
    fine-tuned network to ``filepath``, with the ``extra`` arguments."""
    cmd = [
        sys.executable,
        "-m",
        "monai.bundle",
        command,
        "network_def",
        "--filepath",
        str(filepath),
        "--ckpt_file",
        str(demo_root / "models" / "model.pt"),
        "--meta_file",
        str(DEMO / "metadata.json"),
        "--config_file",
        str(DEMO / "inference.json"),
        "--bundle_root",
        str(demo_root),
        "--features",
        json.dumps(TINY["features"]),
        *extra,
    ]
    subprocess.run(cmd, check=True, cwd=REPO, capture_output=True)


def test_ckpt_export_torchscript(demo_root, tmp_path):
    _export("ckpt_export", tmp_path / "model.ts", demo_root)
    ts = torch.jit.load(str(tmp_path / "model.ts"))
    assert ts(torch.rand(1, 1, 32, 32)).shape == (1, 4, 32, 32)


def test_onnx_export_matches_pytorch_on_a_phantom_slice(demo_root, tmp_path):
    """MONAI's ``onnx_export`` of the fine-tuned network (docs/bundles.md, "Export"), run by onnxruntime with a
    dynamic batch, gives the PyTorch network's output on phantom slices prepared by the bundle's own inference
    transforms."""
    for module in ("onnx", "onnxscript"):
        pytest.importorskip(module, reason="the 'onnx' extra is not installed")
    ort = pytest.importorskip("onnxruntime", reason="the 'onnx' extra is not installed")
    from monai.bundle import ConfigParser

    converter = "{'input_names': ['image'], 'output_names': ['pred'], 'dynamic_axes': {'image': {0: 'batch'}}}"
    _export(
        "onnx_export",
        tmp_path / "model.onnx",
        demo_root,
        "--input_shape",
        "[1, 1, 32, 32]",
        "--converter_kwargs",
        converter,
    )

    parser = ConfigParser()
    parser.read_config(str(DEMO / "inference.json"))
    parser.update({"bundle_root": str(demo_root), "image_size": TINY["image_size"], "features": TINY["features"]})
    image = demo_root / "outputs" / "phantom" / "training" / "patient001" / "patient001_frame01.nii.gz"
    volume = parser.get_parsed_content("preprocessing")({"image": str(image)})["image"].as_tensor()  # (1, H, W, D)
    slices = volume.permute(3, 0, 1, 2)[[0, volume.shape[-1] // 2]].contiguous()  # two slices, (2, 1, 32, 32)
    network = parser.get_parsed_content("network_def")
    network.load_state_dict(torch.load(demo_root / "models" / "model.pt", weights_only=True))
    with torch.no_grad():
        expected = network.eval()(slices).numpy()
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    (got,) = session.run(["pred"], {"image": slices.numpy()})
    assert got.shape == expected.shape == (2, 4, 32, 32)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert (got.argmax(1) == expected.argmax(1)).all()


ABLATIONS = {
    "simclr": {"meta_labels": [None], "pixel_branch": False, "mitigate": False},
    "meta_quantile": {"meta_labels": ["slice_quantile"], "pixel_branch": False},
    "multi_meta": {"pixel_branch": False, "mitigate": False},
    "multi_meta_mitigator": {"pixel_branch": False, "mitigate": True},
    "pixcl": {"meta_labels": [None], "grad_filter_enabled": False},
    "pixcl_gradfilter": {"meta_labels": [None]},
}


@pytest.mark.parametrize("method", sorted(ABLATIONS))
def test_ablation_switches_build_and_run(method, demo_root):
    wf = _run("pretrain.json", "pretrain", demo_root, method=method, **{**TINY, **ABLATIONS[method]})
    trainer = wf.parser.get_parsed_content("train#trainer")
    out = trainer.state.output
    pixel = ABLATIONS[method].get("pixel_branch", True)
    assert any(k.startswith("pix/") for k in out) == pixel
    assert ("pace" in out) == (pixel and ABLATIONS[method].get("grad_filter_enabled", True))
    combiner = wf.parser.get_parsed_content("train#combiner")
    mitigate = ABLATIONS[method].get("mitigate", True)
    assert type(combiner).__name__ == ("GradMitigator" if mitigate else "MeanCombiner")
    assert (demo_root / "outputs" / "pretrain" / method / "encoder.pt").is_file()


def test_pixel_weight_scales_the_pixel_losses(demo_root):
    wf = _run("pretrain.json", "pretrain", demo_root, method="weighted", pixel_weight=0.25, **TINY)
    out = wf.parser.get_parsed_content("train#trainer").state.output
    img = [float(v) for k, v in out.items() if k.startswith("img/")]
    pix = sum(float(v) for k, v in out.items() if k.startswith("pix/"))
    assert pix > 0 and len(img) == 3
    assert float(out["loss"]) == pytest.approx((sum(img) + 0.25 * pix) / len(img), rel=1e-5)  # mean over meta labels


def _pretrain_cmd(root, epochs, overrides=None):
    """``python -m monai.bundle run pretrain`` of the demo bundle with ``overrides`` (default: TINY) for ``epochs``."""
    args = [sys.executable, "-m", "monai.bundle", "run", "pretrain", "--config_file", str(DEMO / "pretrain.json")]
    args += ["--bundle_root", str(root)]
    for k, v in {**(TINY if overrides is None else overrides), "epochs": epochs}.items():
        args += [f"--{k}", json.dumps(v)]
    return args


def test_killed_pretraining_resumes_bit_for_bit(tmp_path):
    """Kill -9 a run after its first epoch checkpoint; rerun the same command; compare with an uninterrupted run."""
    full = tmp_path / "full"
    subprocess.run(_pretrain_cmd(full, 3), check=True, cwd=REPO, capture_output=True)
    killed = tmp_path / "killed"
    proc = subprocess.Popen(_pretrain_cmd(killed, 3), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt_dir = killed / "outputs" / "pretrain" / "gcl"
    deadline = time.time() + 300
    while not list(ckpt_dir.glob("checkpoint*epoch=1.pt")) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (ckpt_dir / "encoder.pt").exists(), "the run finished before it could be killed"
    subprocess.run(_pretrain_cmd(killed, 3), check=True, cwd=REPO, capture_output=True)
    # the resumed saver adopted the killed run's checkpoints: the last two are kept, none is left behind
    assert sorted(p.name for p in ckpt_dir.glob("checkpoint*.pt")) == ["checkpoint_epoch=2.pt", "checkpoint_epoch=3.pt"]
    a = torch.load(full / "outputs" / "pretrain" / "gcl" / "encoder.pt", weights_only=True)
    b = torch.load(ckpt_dir / "encoder.pt", weights_only=True)
    for k in a:
        assert torch.equal(a[k], b[k]), k


class _Crash(RuntimeError):
    """Stands for a run killed between two epochs."""


def _fine_tune(root, crash_after=None, **override):
    """``train.json`` of the demo bundle, random init., 4 epochs; ``crash_after``: stop with an error after that
    epoch's checkpoint is written (a handler attached after the bundle's own), as a killed run would."""
    files = [str(DEMO / "train.json")]
    args = {**TINY_FT, "init": "random", "epochs": 4, **override}
    wf = ConfigWorkflow(config_file=files, workflow_type=None, bundle_root=str(root), run_id="run", **args)
    wf.initialize()
    if crash_after is not None:

        def crash(engine):
            raise _Crash(f"stopped after epoch {engine.state.epoch}")

        class CrashAfter:  # attached with the bundle's checkpoint handlers, after its saver
            def attach(self, engine):
                engine.add_event_handler(Events.EPOCH_COMPLETED(once=crash_after), crash)

        wf.parser.get_parsed_content("train#checkpoint_handlers").append(CrashAfter())
        with pytest.raises(RuntimeError) as raised:  # MONAI wraps what the run expression raised
            wf.run()
        assert isinstance(raised.value.__cause__, _Crash)
        return wf
    wf.run()
    wf.finalize()
    return wf


@pytest.mark.parametrize("channels_last", [False, True])
def test_fine_tuning_resumes_bit_for_bit(tmp_path, channels_last):
    """``--resume True`` continues a run stopped after its second epoch from its last checkpoint: the same weights,
    the same kept model and the same best-model tracking as the uninterrupted run; in either memory layout (the
    checkpoint keeps the channels-last strides of the weights and of Adam's moments)."""
    full = _fine_tune(tmp_path / "full", channels_last=channels_last)
    stopped = _fine_tune(tmp_path / "stopped", crash_after=2, channels_last=channels_last)
    out = tmp_path / "stopped" / "outputs" / "finetune" / "random_L1_d0_s0"
    assert sorted(p.name for p in out.glob("checkpoint*.pt")) == ["checkpoint_epoch=1.pt", "checkpoint_epoch=2.pt"]
    assert stopped.parser.get_parsed_content("train#trainer").state.epoch == 2
    resumed = _fine_tune(tmp_path / "stopped", resume=True, channels_last=channels_last)
    assert resumed.parser.get_parsed_content("train#trainer").state.iteration == 4 * TINY_FT["iterations_per_epoch"]
    a, b = (wf.parser.get_parsed_content("network").state_dict() for wf in (full, resumed))
    assert all(torch.equal(a[k], b[k]) for k in a)
    roots = (tmp_path / "full", tmp_path / "stopped")
    kept = [torch.load(root / "models" / "model.pt", weights_only=True) for root in roots]
    assert all(torch.equal(kept[0][k], kept[1][k]) for k in kept[0])
    tracking = [wf.parser.get_parsed_content("validate#checkpointer").state_dict() for wf in (full, resumed)]
    assert tracking[0] == tracking[1] and tracking[0]["_saved"]
    # a finished run resumed again trains no further and keeps its model
    again = _fine_tune(tmp_path / "stopped", resume=True, channels_last=channels_last)
    assert again.parser.get_parsed_content("train#trainer").state.iteration == 4 * TINY_FT["iterations_per_epoch"]
    assert all(torch.equal(b[k], v) for k, v in again.parser.get_parsed_content("network").state_dict().items())
    assert all(torch.equal(kept[1][k], v) for k, v in torch.load(roots[1] / "models" / "model.pt").items())


def test_fine_tuning_resumes_from_the_command_line(tmp_path):
    """``python -m monai.bundle run ... --resume True`` in a fresh process (what a user and the learning-curve driver
    run; only the config's own imports are loaded): the second call continues the first run's 2 epochs to 3."""
    command = [sys.executable, "-m", "monai.bundle", "run", "--config_file", str(DEMO / "train.json")]
    command += ["--bundle_root", str(tmp_path), "--resume", "True"]
    for k, v in {**TINY_FT, "init": "random"}.items():
        command += [f"--{k}", json.dumps(v)]
    out = tmp_path / "outputs" / "finetune" / "random_L1_d0_s0"
    for epochs, log in ((2, "Engine run resuming from iteration 0, epoch 0 until 2 epochs"), (3, "epoch 2 until 3")):
        done = subprocess.run([*command, "--epochs", str(epochs)], cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        assert log in done.stdout + done.stderr
    assert sorted(p.name for p in out.glob("checkpoint*.pt")) == ["checkpoint_epoch=2.pt", "checkpoint_epoch=3.pt"]


def test_fine_tuning_afresh_removes_an_earlier_runs_checkpoints(tmp_path):
    """Without ``resume`` a run in a used folder starts from scratch and removes the earlier run's checkpoints, so
    that a later ``--resume True`` cannot pick up a more advanced checkpoint of another run."""
    _fine_tune(tmp_path, crash_after=3)
    out = tmp_path / "outputs" / "finetune" / "random_L1_d0_s0"
    assert (out / "checkpoint_epoch=3.pt").is_file()
    _fine_tune(tmp_path, crash_after=1)
    assert sorted(p.name for p in out.glob("checkpoint*.pt")) == ["checkpoint_epoch=1.pt"]


def test_resume_is_refused_for_semi_supervised_fine_tuning(tmp_path):
    with pytest.raises(RuntimeError) as raised:
        _fine_tune(tmp_path, resume=True, semi_supervised="mean_teacher")
    assert any("resume=True is not available with semi_supervised='mean_teacher'" in m for m in _messages(raised.value))


def test_views_on_device_pretrains_through_the_bundle(tmp_path):
    """views_on_device: the loader delivers un-augmented slices and the engine draws the two views on the device."""
    wf = _run("pretrain.json", "pretrain", tmp_path, **TINY, views_on_device=True)
    trainer = wf.parser.get_parsed_content("train#trainer")
    assert type(trainer.device_views).__name__ == "BatchContrastiveViews"
    assert trainer.device_views.spatial_size == tuple(TINY["image_size"])
    batch = next(iter(wf.parser.get_parsed_content("train#dataloader")))
    assert "image_2" not in batch and batch["image"].shape[1:] == (1, *TINY["image_size"])
    assert trainer.state.iteration > 0 and torch.isfinite(trainer.state.output["loss"])
    assert (tmp_path / "outputs" / "pretrain" / "gcl" / "encoder.pt").is_file()


def _acdc_initialize_error(config: str, run_id: str, bundle_root: Path, **override) -> list[str]:
    """The messages of the error that initializing gcl_acdc's ``config`` raises, its dataset folder
    ``bundle_root/nowhere`` missing."""
    wf = ConfigWorkflow(
        config_file=str(ACDC / config),
        workflow_type=None,
        bundle_root=str(bundle_root),
        run_id=run_id,
        dataset_dir=str(bundle_root / "nowhere"),
        **override,
    )
    with pytest.raises(Exception) as excinfo:
        wf.initialize()
    return _messages(excinfo.value)


def test_missing_dataset_dir_fails_before_work(tmp_path):
    messages = _acdc_initialize_error("pretrain.json", "pretrain", tmp_path)
    assert any("nowhere" in m and "layout" in m.lower() for m in messages), messages
    assert not (tmp_path / "outputs" / "split.json").exists()


@pytest.mark.parametrize(
    ("config", "switch"),
    [
        ("pretrain.json", "pixel_branch"),
        ("pretrain.json", "mitigate"),
        ("train.json", "freeze_encoder"),
        ("train.json", "dice_batch"),
    ],
)
def test_a_switch_given_as_a_string_fails_before_work(config, switch, tmp_path):
    """``--pixel_branch false`` on the command line is the string "false", which Python reads as true."""
    messages = _acdc_initialize_error(config, "run", tmp_path, **{switch: "false"})
    assert any(f"{switch}='false'" in m and "True or False" in m for m in messages), messages
    ok = ConfigWorkflow(
        config_file=str(ACDC / config), workflow_type=None, bundle_root=str(tmp_path), run_id="run", **{switch: False}
    )
    from gcl_monai.bundle import check_switches

    check_switches(**{switch: ok.parser.get_parsed_content(switch)})  # the documented spelling passes


@pytest.mark.parametrize("config", ["pretrain.json", "train.json"])
@pytest.mark.parametrize("cuda", [False, True])
def test_loader_workers_on_cuda_only(config, cuda, monkeypatch):
    """On a GPU the training loader uses persistent workers and pinned memory; on a CPU it stays in the main process."""
    from monai.bundle import ConfigParser

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    parser = ConfigParser()
    parser.read_config(str(DEMO / config))
    workers = parser.get_parsed_content("num_workers")
    assert workers == (4 if cuda else 0)
    assert parser.get_parsed_content("train#dataloader#pin_memory") is cuda
    assert parser.get_parsed_content("train#dataloader#persistent_workers") is cuda
    parser["num_workers"] = 3  # a user override reaches the loader
    assert parser.get_parsed_content("train#dataloader#persistent_workers", lazy=False) is True


@pytest.mark.parametrize("precision", ["medium", "bogus"])
def test_pretraining_sets_the_float32_matmul_precision(precision, tmp_path):
    """``float32_matmul_precision`` reaches torch before the run; a value torch would ignore is refused by name."""
    wf = ConfigWorkflow(
        config_file=str(DEMO / "pretrain.json"),
        workflow_type=None,
        bundle_root=str(tmp_path),
        run_id="pretrain",
        **{**TINY, "float32_matmul_precision": precision},
    )
    try:
        if precision == "bogus":
            with pytest.raises(Exception) as error:
                wf.initialize()
            messages = _messages(error.value)
            assert any("float32_matmul_precision must be one of" in m and "'bogus'" in m for m in messages)
        else:
            wf.initialize()
            assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision("highest")


class _ScalarReads(TorchDispatchMode):
    """
    Counts the reads of a tensor's value by the host (``.item()``, ``float()``: a synchronisation on a GPU) while
    ``active``. MONAI's spatial transforms read their spatial rank from a float64 scalar they create on the host
    (``torch.tensor(3.0, dtype=torch.double)`` for a tensor without metadata), never on the device: not counted.
    """

    def __init__(self):
        super().__init__()
        self.count = 0
        self.active = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += (
            self.active and func is torch.ops.aten._local_scalar_dense.default and args[0].dtype != torch.float64
        )
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("path", ["loader", "on_device", "batched_augmentation"])
def test_fine_tuning_with_the_slices_on_the_device_reads_no_value_per_iteration(path, tmp_path):
    """
    ``data_on_device`` with ``decollate`` off and the loss logged every ``log_interval`` iterations: the trainer's
    batches come from ``DeviceSliceBatches`` (the dataset's augmentation, there) and the hot loop (from fetching the
    batch to the last handler of the iteration) reads no tensor's value; the loader path with MONAI's decollation
    reads the loss at every iteration. Adam's reads of its step counts are not counted: they are kept on the host
    (``state["step"]`` is a CPU tensor unless ``capturable``), so they do not synchronise with a GPU. The per-slice
    augmentation runs without its intensity steps (MONAI's AdjustContrast reads the image's range); the batched one
    (``batched_augmentation``) with all of them.
    """
    iterations = 12
    on_device = path != "loader"
    overrides = {
        **TINY_FT,
        "init": "random",
        "epochs": 2,
        "iterations_per_epoch": iterations // 2,
        "val_interval": 3,  # none: the validation reads its metric
    }
    if path != "batched_augmentation":
        # no augmentation that reads a value (MONAI's AdjustContrast reads the image's range)
        overrides.update({f"augmentation#{step}#prob": 0.0 for step in (3, 4, 5, 6)})
    if on_device:
        overrides.update(data_on_device=True, decollate=False, log_interval=iterations)
    if path == "batched_augmentation":
        # every step acts, the contrast too (the batched form reads no value)
        overrides.update({f"augmentation#{step}#prob": 1.0 for step in (3, 4, 5, 6)})
        overrides.update(batched_augmentation=True, affine_prob=1.0)
    wf = ConfigWorkflow(
        config_file=str(DEMO / "train.json"), workflow_type=None, bundle_root=str(tmp_path), run_id="run", **overrides
    )
    wf.initialize()
    trainer = wf.parser.get_parsed_content("train#trainer")
    assert type(trainer.data_loader).__name__ == ("DeviceSliceBatches" if on_device else "DataLoader")
    augmentation = getattr(trainer.data_loader, "augmentation", None)
    assert (type(augmentation).__name__ == "BatchSliceAugmentation") == (path == "batched_augmentation")
    reads = _ScalarReads()

    def counting(active):
        def switch(*_):
            reads.active = active

        return switch

    trainer.add_event_handler(Events.GET_BATCH_STARTED, counting(True))
    trainer.add_event_handler(Events.ITERATION_COMPLETED, counting(False))
    trainer.optimizer.register_step_pre_hook(counting(False))
    trainer.optimizer.register_step_post_hook(counting(True))
    with reads:
        wf.run()
    output = trainer.state.output
    loss = output["loss"] if on_device else output[0]["loss"]
    assert trainer.state.iteration == iterations and np.isfinite(float(loss))
    scalars = read_scalars(tmp_path / "outputs" / "finetune" / "random_L1_d0_s0" / "tensorboard")
    if on_device:
        assert reads.count == 1, reads.count  # the loss, logged at the last iteration
        assert len(scalars["train_loss"][1]) == 1
    else:
        assert reads.count >= iterations, reads.count
        assert len(scalars["train_loss"][1]) == iterations


def test_slices_per_patient_groups_the_pretraining_batches(tmp_path):
    """--slices_per_patient 2: the bundle's loader reads batches of 2 patients x 2 slices (default 1: shuffled)."""
    wf = _run("pretrain.json", "pretrain", tmp_path, **TINY, slices_per_patient=2)
    loader = wf.parser.get_parsed_content("train#dataloader")
    assert type(loader.sampler).__name__ == "GroupedSampler"
    for batch in loader:
        patients = batch["patient_id"].view(-1).tolist()
        assert patients[0::2] == patients[1::2]
    with pytest.raises(RuntimeError) as refused:  # MONAI's config wraps the sampler's ValueError
        _run("pretrain.json", "pretrain", tmp_path / "odd", **TINY, slices_per_patient=3)
    assert "batch size (4) must be a multiple of the slices per group (3)" in str(refused.value.__cause__)
