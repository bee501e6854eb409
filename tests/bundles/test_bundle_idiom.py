"""The bundles are written in MONAI's idiom: every pre-processing and augmentation step is a transform with
``_target_`` that one override or one extra config file changes, components are chosen by ``_target_``,
``_disabled_`` or overlay files, and no expression is a program."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from monai.bundle import ConfigParser, ConfigWorkflow
from monai.transforms import MapLabelValued, RandAdjustContrastd, RandFlipd, RandGaussianNoised

from gcl_monai.gradients import GradMitigator, MeanCombiner
from gcl_monai.transforms import CenterSquareCropd, RandRelativeGaussianNoised, VolumeToSlicesd

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
BUNDLES = ["gcl_demo", "gcl_acdc", "gcl_prostate", "gcl_mmwhs", "gcl_dicom"]
CONFIGS = sorted((REPO / "bundles").glob("*/configs/**/*.json"))
DEMO = REPO / "bundles" / "gcl_demo" / "configs"
MAX_EXPRESSION = 100
TERNARY = re.compile(r"\bif\b.*\belse\b")
#: the keys whose value is a transform pipeline
PIPELINES = {"preprocessing", "postprocessing", "volume_transforms", "volume_transform", "transform"}


def _strings(node, path=""):
    """Every string of a config, with its id (``a#b#0``)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, f"{path}#{key}" if path else key)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _strings(value, f"{path}#{i}")
    elif isinstance(node, str):
        yield path, node


def _pipelines(node, path=""):
    """Every transform pipeline of a config: ``(id, value)`` of each key in :data:`PIPELINES`."""
    if isinstance(node, dict):
        for key, value in node.items():
            sub = f"{path}#{key}" if path else key
            if key in PIPELINES:
                yield sub, value
            yield from _pipelines(value, sub)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _pipelines(value, f"{path}#{i}")


def _lookup(config: dict, ref: str):
    node = config
    for part in ref.lstrip("@").split("#"):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _parser(config_files, **overrides) -> ConfigParser:
    parser = ConfigParser()
    parser.read_config([str(f) for f in config_files] if isinstance(config_files, list) else str(config_files))
    parser.update(overrides)
    return parser


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: str(p.relative_to(REPO / "bundles")))
def test_expressions_are_short_and_choose_nothing(config):
    """No ``$`` expression over 100 characters, none a conditional expression (``a if c else b``)."""
    expressions = [(i, s) for i, s in _strings(json.loads(config.read_text())) if s.startswith("$")]
    long = [(i, len(s)) for i, s in expressions if len(s) > MAX_EXPRESSION]
    assert not long, f"expressions over {MAX_EXPRESSION} characters: {long}"
    ternaries = [i for i, s in expressions if TERNARY.search(s)]
    assert not ternaries, f"conditional expressions: {ternaries}"


def _steps(content: dict, pipeline) -> list:
    """The steps of a pipeline: its own list, or the config's lists it names (``%augmentation``, a copy;
    ``@volume_transforms``; ``$@volume_transforms + [@slicing]``)."""
    steps = pipeline if isinstance(pipeline, list) else pipeline["transforms"]
    if isinstance(steps, list):
        return steps
    if steps.startswith("$gcl_monai.transforms.dice_grid_steps("):  # evaluate.json: the grid named by dice_grid
        return [s for grid in content["evaluate"]["grids"].values() for s in grid]
    match = re.fullmatch(r"[%@](\w+)|\$@(\w+) \+ \[@(\w+)\]", steps)
    assert match, steps
    if match[1]:
        return content[match[1]]
    return content[match[2]] + [content[match[3]]]


@pytest.mark.parametrize("config", [c for c in CONFIGS if "recipes" not in c.parts and c.name != "demo.json"])
def test_every_pipeline_lists_its_transforms(config):
    """Each pre-processing, augmentation and post-processing pipeline is a ``Compose`` of ``_target_`` transforms
    (or references to one, or to the config's list of steps), never a factory that builds the steps out of sight."""
    content = json.loads(config.read_text())
    for path, pipeline in _pipelines(content):
        if isinstance(pipeline, str) and pipeline.startswith("@"):
            continue  # the same pipeline, defined elsewhere in the config
        top_level_list = path in content and isinstance(pipeline, list)  # the volume steps, defined once
        assert top_level_list or (isinstance(pipeline, dict) and pipeline.get("_target_") == "Compose"), path
        for step in _steps(content, pipeline):
            step = _lookup(content, step) if isinstance(step, str) and step.startswith("@") else step
            assert isinstance(step, dict) and "_target_" in step, (path, step)
            assert not step["_target_"].endswith("_transforms"), (path, step["_target_"])


def _augmentations(parser: ConfigParser) -> dict[str, list]:
    """The parsed augmentation of the labelled and of the unlabelled slices."""
    paths = ("train#preprocessing", "train#unlabeled_dataset#transform")
    return {path: list(parser.get_parsed_content(path).transforms) for path in paths}


def test_one_override_of_the_shared_augmentation_reaches_both_paths():
    """The labelled and the unlabelled slices draw from one list, ``augmentation`` (each path its own instances):
    ``--contrast_prob 0.2`` or ``--augmentation#4#prob 0.2`` changes the contrast step's probability on both paths,
    nothing else (the listed step 3, the elastic deformation, is off by default, so the parsed lists have the
    contrast at 3)."""
    default = _augmentations(_parser(DEMO / "train.json"))
    for override in ({"contrast_prob": 0.2}, {"augmentation#4#prob": 0.2}):
        changed = _augmentations(_parser(DEMO / "train.json", **override))
        for path, steps in changed.items():
            assert isinstance(steps[3], RandAdjustContrastd) and steps[3].prob == 0.2, (override, path)
            assert default[path][3].prob == 0.3
            assert [type(t) for t in steps] == [type(t) for t in default[path]]
            assert [getattr(t, "prob", None) for i, t in enumerate(steps) if i != 3] == [
                getattr(t, "prob", None) for i, t in enumerate(default[path]) if i != 3
            ]
    labelled, unlabelled = changed.values()
    assert not {id(t) for t in labelled} & {id(t) for t in unlabelled}


def test_the_noise_switch_reaches_both_paths():
    noise = _augmentations(_parser(DEMO / "train.json", noise_prob=0.7))
    assert [steps[6].prob for steps in noise.values()] == [0.7, 0.7]
    assert all(isinstance(steps[6], RandRelativeGaussianNoised) for steps in noise.values())


def test_the_unlabelled_slices_share_the_labelled_volume_pipeline_and_load_no_label(tmp_path):
    """One volume pipeline for the labelled and unlabelled volumes (and, without the slicing, the validation's):
    the unlabelled entries lose their label, and the steps skip it."""
    parser = _parser(DEMO / "train.json", bundle_root=str(tmp_path), semi_supervised="mean_teacher")
    assert parser["train#unlabeled_dataset#volume_transform"] == "@train#volume_transforms"
    volume_steps = parser.get_parsed_content("train#volume_transforms").transforms
    assert list(parser.get_parsed_content("validate#preprocessing").transforms) == list(volume_steps[:-1])
    labelled = parser.get_parsed_content("train#dataset")
    unlabelled = parser.get_parsed_content("train#unlabeled_dataset")
    assert all("label" in d for d in labelled.volume_data)
    assert all("label" not in d for d in unlabelled.volume_data)
    assert {"image", "label"} <= set(labelled[0]) and "label" not in unlabelled[0] and "image" in unlabelled[0]


def test_an_extra_config_file_replaces_or_removes_one_step(tmp_path):
    """An extra file in ``--config_file "['configs/train.json','my.json']"`` swaps one transform for another, or
    switches one off with ``_disabled_``; the other steps stay as they were, on both paths."""
    default = [type(t) for t in _parser(DEMO / "train.json").get_parsed_content("train#preprocessing").transforms]
    noise = {"_target_": "RandGaussianNoised", "keys": "image", "prob": 0.3, "std": 0.05}
    swap = tmp_path / "swap.json"
    swap.write_text(json.dumps({"augmentation#7": noise}))  # listed 7, parsed 6
    for steps in _augmentations(_parser([DEMO / "train.json", swap])).values():
        assert [type(t) for t in steps] == default[:6] + [RandGaussianNoised] + default[7:]
    remove = tmp_path / "remove.json"
    remove.write_text(json.dumps({"augmentation#1#_disabled_": True}))
    for steps in _augmentations(_parser([DEMO / "train.json", remove])).values():
        assert [type(t) for t in steps] == default[:1] + default[2:] and default[1] is RandFlipd


def test_the_command_line_reaches_a_volume_step_and_the_meta_labels(tmp_path):
    """One step of the volume pipeline (here the field of view's crop) and the meta labels copied to every slice are
    overrides like any other; the pre-training and the probe share the volume steps."""
    parser = _parser(
        DEMO / "pretrain.json",
        bundle_root=str(tmp_path),
        **{"volume_transforms#5#fov_shape": "square", "volume_meta_keys": ["patient_id"]},
    )
    steps = parser.get_parsed_content("train#volume_transforms").transforms
    assert isinstance(steps[4], CenterSquareCropd)  # listed 5: MapLabelValued is off without a probe_label_map
    assert isinstance(steps[-1], VolumeToSlicesd) and steps[-1].meta_keys == ("patient_id",)
    assert list(parser.get_parsed_content("probe#transform").transforms) == list(steps[:-1])
    assert parser.get_parsed_content("slicing") is steps[-1]
    assert all("label" not in d for d in parser.get_parsed_content("train#dataset").volume_data)


@pytest.mark.parametrize("bundle", BUNDLES)
def test_labels_are_remapped_where_a_bundle_has_a_label_map(bundle):
    """``MapLabelValued`` runs only when ``label_map`` is set (MM-WHS's label values 205 .. 850 -> 1 .. 7)."""
    parser = _parser(REPO / "bundles" / bundle / "configs" / "train.json")
    maps = [t for t in parser.get_parsed_content("train#volume_transforms").transforms if isinstance(t, MapLabelValued)]
    label_map = parser.get_parsed_content("label_map")
    assert len(maps) == (label_map is not None)
    if maps:
        assert maps[0].mapper.orig_labels == [float(k) for k in label_map]
        assert maps[0].mapper.target_labels == [float(v) for v in label_map.values()]


@pytest.mark.parametrize(
    ("overrides", "overlays", "optimizer", "combiner", "pixel_loss"),
    [
        ({}, [], torch.optim.Adam, GradMitigator, True),
        ({"optimizer_name": "sgd"}, [], torch.optim.SGD, GradMitigator, True),
        ({"mitigate": False, "pixel_branch": False}, [], torch.optim.Adam, MeanCombiner, False),
        ({}, ["sgd.json"], torch.optim.SGD, GradMitigator, True),
        ({}, ["simclr.json"], torch.optim.Adam, MeanCombiner, False),
        ({}, ["simclr.json", "sgd.json"], torch.optim.SGD, MeanCombiner, False),
    ],
)
def test_switches_and_recipe_overlays_choose_the_components(overrides, overlays, optimizer, combiner, pixel_loss):
    """The documented switches (``--optimizer_name``, ``--mitigate``, ``--pixel_branch``) and the overlay files of
    ``configs/recipes`` choose the pre-training's optimiser, gradient combiner and pixel loss."""
    files = [DEMO / "pretrain.json"] + [DEMO / "recipes" / name for name in overlays]
    parser = _parser(files, features=[4, 4, 8, 8, 16, 4], **overrides)
    opt = parser.get_parsed_content("optimizer")
    assert type(opt) is optimizer
    if optimizer is torch.optim.SGD:
        group = opt.param_groups[0]
        assert group["momentum"] == 0.9 and group["lr"] == (0.1 if overlays else 1e-4)
    assert type(parser.get_parsed_content("train#combiner")) is combiner
    assert (parser.get_parsed_content("train#pixel_loss") is not None) == pixel_loss
    if "simclr.json" in overlays:
        assert parser.get_parsed_content("meta_labels") == [None] and parser.get_parsed_content("method") == "simclr"


def test_paper_recipe_overlay_reads_the_paper_literally():
    parser = _parser([DEMO / "pretrain.json", DEMO / "recipes" / "paper.json"])
    assert parser.get_parsed_content("method") == "paper"
    assert [parser.get_parsed_content(k) for k in ("loss_form", "view_weight", "min_target")] == ["out", None, None]
    flag = _parser(DEMO / "pretrain.json", recipe="paper")
    assert [flag.get_parsed_content(k) for k in ("loss_form", "view_weight", "min_target")] == ["out", None, None]


def test_paper_fine_tuning_overlay_states_the_papers_schedule(tmp_path):
    """``recipes/finetune_paper.json`` on ``train.json``: batch 5, Adam 1e-4, 300 epochs of one pass over the labelled
    slices each (cosine over all of them), a validation every 10 epochs."""
    parser = _parser([DEMO / "train.json", DEMO / "recipes" / "finetune_paper.json"], bundle_root=str(tmp_path))
    slices = len(parser.get_parsed_content("train#dataset"))
    assert parser.get_parsed_content("iterations_per_epoch") == slices // 5 and slices >= 5
    assert parser.get_parsed_content("optimizer").param_groups[0]["lr"] == 1e-4
    assert parser.get_parsed_content("train#dataloader").batch_size == 5
    assert parser.get_parsed_content("train#lr_scheduler").T_max == 300 * (slices // 5)
    assert parser.get_parsed_content("train#trainer").state.max_epochs == 300


def test_full_supervision_overlay_states_the_recipe_chosen_on_validation(tmp_path):
    """``recipes/finetune_fullsup.json``: batch 20, Adam 1e-3, cosine over 2500 iterations validated every 500
    (round 6), on ``train.json``; the bilinear export and the in-plane mirroring (pred-interp, mirror-tta) when it
    is stacked on ``evaluate.json`` or ``inference.json``."""
    overlay = DEMO / "recipes" / "finetune_fullsup.json"
    parser = _parser([DEMO / "train.json", overlay], bundle_root=str(tmp_path))
    assert parser.get_parsed_content("train#dataloader").batch_size == 20
    assert parser.get_parsed_content("optimizer").param_groups[0]["lr"] == 1e-3
    assert parser.get_parsed_content("train#lr_scheduler").T_max == 2500
    trainer = parser.get_parsed_content("train#trainer")
    assert trainer.state.max_epochs == 5 and trainer.state.epoch_length == 500
    for files, inferer, export in (
        ([DEMO / "train.json", DEMO / "evaluate.json", overlay], "evaluate#inferer", "evaluate#export"),
        ([DEMO / "inference.json", overlay], "inferer", "export"),
    ):
        parser = _parser(files, bundle_root=str(tmp_path))
        assert parser.get_parsed_content(inferer).spatial_axes == (0, 1)
        steps = parser.get_parsed_content(export)[parser.get_parsed_content("pred_interp")]
        assert [type(t).__name__ for t in steps][-3:] == ["Invertd", "AsDiscreted", "KeepLargestConnectedComponentd"]


def test_acdc_full_supervision_overlay_trains_and_infers_on_its_192_grid(tmp_path):
    """In ``gcl_acdc`` the overlay also sets the 192 x 192 grid (round 8), so the model it trains is read on that grid
    when the overlay is stacked on ``inference.json``; the bundle alone keeps 128 x 128."""
    acdc = REPO / "bundles" / "gcl_acdc" / "configs"
    overlay = acdc / "recipes" / "finetune_fullsup.json"
    for files, inferer in (([acdc / "inference.json", overlay], (192, 192)), ([acdc / "inference.json"], (128, 128))):
        parser = _parser(files, bundle_root=str(tmp_path))
        assert tuple(parser.get_parsed_content("inferer").inferer.roi_size) == inferer
    train = _parser([acdc / "train.json", overlay], bundle_root=str(tmp_path))
    assert train.get_parsed_content("image_size") == [192, 192] and train.get_parsed_content("batch_size") == 20


def test_few_label_overlay_states_the_recipe_of_the_l2_rounds(tmp_path):
    """``recipes/finetune_fewlabel.json``: batch 20, Adam 1e-3, cosine over 1500 iterations validated every 250
    (rounds 1 and 7), on ``train.json``; the bilinear export without mirroring when stacked on ``evaluate.json``."""
    overlay = DEMO / "recipes" / "finetune_fewlabel.json"
    parser = _parser([DEMO / "train.json", overlay], bundle_root=str(tmp_path), num_labeled=1)
    assert parser.get_parsed_content("train#dataloader").batch_size == 20
    assert parser.get_parsed_content("optimizer").param_groups[0]["lr"] == 1e-3
    assert parser.get_parsed_content("train#lr_scheduler").T_max == 1500
    trainer = parser.get_parsed_content("train#trainer")
    assert trainer.state.max_epochs == 6 and trainer.state.epoch_length == 250
    evaluation = _parser([DEMO / "train.json", DEMO / "evaluate.json", overlay], bundle_root=str(tmp_path))
    assert evaluation.get_parsed_content("pred_interp") == "bilinear"
    assert evaluation.get_parsed_content("evaluate#inferer").spatial_axes == ()  # one pass, no mirroring


@pytest.mark.parametrize(
    ("views_on_device", "steps"), [(False, ["ContrastiveViewsd", "EnsureTyped"]), (True, ["EnsureTyped"])]
)
def test_views_on_device_removes_the_per_slice_views(views_on_device, steps):
    """``--views_on_device True`` switches the per-slice views off (``_disabled_``) and the batch views on."""
    parser = _parser(DEMO / "pretrain.json", views_on_device=views_on_device)
    assert [type(t).__name__ for t in parser.get_parsed_content("train#preprocessing").transforms] == steps
    assert (parser.get_parsed_content("train#device_views") is not None) == views_on_device


def test_a_recipe_overlay_runs_from_the_command_line_spelling(tmp_path):
    """``--config_file "['.../pretrain.json','.../recipes/simclr.json']"`` is a list of files to ``ConfigWorkflow``."""
    wf = ConfigWorkflow(
        config_file=[str(DEMO / "pretrain.json"), str(DEMO / "recipes" / "simclr.json")],
        workflow_type=None,
        bundle_root=str(tmp_path),
        run_id="pretrain",
    )
    assert wf.parser.get_parsed_content("pretrain_dir") == f"{tmp_path}/outputs/pretrain/simclr"


def test_a_meta_label_added_on_the_command_line_is_contrasted(tmp_path):
    """``--volume_meta_keys`` and ``--meta_labels`` with a key of a JSON datalist (``scanner``, integer-encoded when
    the split is written): the slices carry it and pre-training logs its loss (docs/bundles.md, "Adding a meta
    label")."""
    from gcl_monai.bundle import ensure_phantom

    phantom = Path(ensure_phantom(tmp_path / "phantom", num_patients=6))
    images = sorted(p for p in phantom.glob("training/*/*_frame??.nii.gz"))
    entries = [
        {"image": str(p), "label": str(p).replace(".nii.gz", "_gt.nii.gz"), "patient": p.parent.name} for p in images
    ]
    for entry in entries:
        entry["scanner"] = "A" if int(entry["patient"][-1]) % 2 else "B"
    datalist = tmp_path / "datalist.json"
    datalist.write_text(json.dumps({"training": entries}))
    meta_labels = ["patient_id", "slice_quantile", "scanner"]
    tiny = {"num_pretrain": 2, "num_val": 1, "num_test": 1, "image_size": [32, 32], "features": [4, 4, 8, 8, 16, 4]}
    wf = ConfigWorkflow(
        config_file=str(DEMO / "pretrain.json"),
        workflow_type=None,
        bundle_root=str(tmp_path),
        run_id="pretrain",
        **tiny,
        batch_size=4,
        epochs=1,
        dataset="json",
        dataset_dir=str(datalist),
        stratify_key="scanner",
        volume_meta_keys=["patient_id", "scanner"],
        meta_labels=meta_labels,
    )
    wf.initialize()
    wf.run()
    assert {int(s["scanner"]) for s in wf.parser.get_parsed_content("train#dataset")} <= {0, 1}
    output = wf.parser.get_parsed_content("train#trainer").state.output
    assert {f"img/{m}" for m in meta_labels} <= set(output)


def test_the_bundles_pipelines_compute_what_the_python_presets_compute(tmp_path):
    """The pipelines listed in the configs and the presets of ``gcl_monai.transforms`` (the Python API) give the same
    slices and, seeded alike, the same random views and augmentations: the configs changed how the pipelines are
    written, not what they draw."""
    from gcl_monai.bundle import ensure_phantom
    from gcl_monai.data import load_datalist, without_labels
    from gcl_monai.transforms import (
        finetune_transforms,
        pretrain_transforms,
        volume_eval_transforms,
        volume_transforms,
    )

    item = load_datalist(ensure_phantom(tmp_path, num_patients=1), "acdc", meta_keys=["patient_id", "organ_state"])[0]
    size = {"image_size": [32, 32]}
    pretrain, train = _parser(DEMO / "pretrain.json", **size), _parser(DEMO / "train.json", **size)

    def same(a, b):
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], torch.Tensor):
                torch.testing.assert_close(torch.as_tensor(a[key]), torch.as_tensor(b[key]), rtol=0, atol=0)
            else:
                assert a[key] == b[key], key

    image_only = without_labels([item])[0]  # pre-training's entries (``train#dataset``'s data)
    pairs = [
        (pretrain, image_only, volume_transforms(32, with_label=False, fov_scale=0.8)),
        (train, item, volume_transforms(32, meta_keys=[], fov_scale=0.8)),
    ]
    for parser, entry, preset in pairs:
        listed = parser.get_parsed_content("train#volume_transforms")(dict(entry))
        built = preset(dict(entry))
        assert len(listed) == len(built)
        for a, b in zip(listed, built):
            same(a, b)
    same(
        train.get_parsed_content("validate#preprocessing")(dict(item)),
        volume_eval_transforms(32, fov_scale=0.8)(dict(item)),
    )
    slices = volume_transforms(32, meta_keys=[], fov_scale=0.8)(dict(item))[:6]
    augmentations = [
        (pretrain, pretrain_transforms(32, seed=0)),
        (train, finetune_transforms(32, rotate_degrees=30.0, scale_range=0.2, affine_prob=0.8, seed=0)),
    ]
    for parser, preset in augmentations:
        listed = parser.get_parsed_content("train#preprocessing").set_random_state(seed=0)
        for s in slices:
            same(listed(dict(s)), preset(dict(s)))


@pytest.mark.parametrize(("config", "key"), [("pretrain", "network"), ("train", "local_network")])
@pytest.mark.parametrize("sync_bn", [False, True])
def test_sync_bn_converts_the_network_of_the_multi_gpu_overrides(config, key, sync_bn, monkeypatch):
    """``--sync_bn True`` under ``torchrun``: the network's batch norms become ``SyncBatchNorm`` (``sync_bn_network``,
    ``_disabled_`` otherwise); the device is the process's ``LOCAL_RANK`` (the CPU without CUDA)."""
    monkeypatch.setenv("LOCAL_RANK", "0")
    files = [DEMO / f"{config}.json", DEMO / f"multi_gpu_{config}.json"]
    parser = _parser(files, sync_bn=sync_bn, features=[4, 4, 8, 8, 16, 4])
    norms = {type(m) for m in parser.get_parsed_content(key).modules() if "BatchNorm" in type(m).__name__}
    assert norms == ({torch.nn.SyncBatchNorm} if sync_bn else {torch.nn.BatchNorm2d})
    assert parser.get_parsed_content("device") == torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    assert parser.get_parsed_content("dist_backend") == ("nccl" if torch.cuda.is_available() else "gloo")
