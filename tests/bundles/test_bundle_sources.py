"""The bundles' workflow configs are exactly what ``bundle_sources/`` generates: the workflow written once
(``common/``) merged with each bundle's dataset values by MONAI's multi-file merge."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
SOURCES = REPO / "bundle_sources"
GENERATE = SOURCES / "generate.py"
BUNDLES = ["gcl_demo", "gcl_acdc", "gcl_prostate", "gcl_mmwhs", "gcl_dicom"]
WORKFLOWS = [
    "pretrain.json",
    "train.json",
    "evaluate.json",
    "inference.json",
    "multi_gpu_pretrain.json",
    "multi_gpu_train.json",
]
# the only keys a bundle may set: what differs between datasets
DATASET_KEYS = {
    "bundle_root",
    "dataset",
    "dataset_dir",
    "num_patients",
    "data_seed",
    "num_pretrain",
    "num_val",
    "num_test",
    "meta_labels",
    "volume_meta_keys",
    "image_size",
    "fov_scale",
    "fov_shape",
    "features",
    "num_classes",
    "class_names",
    "label_map",
    "stratify_key",
    "dataset_options",
    # the probe's classes, and whether it runs: off where the training patients have no labels (a DICOM archive) or
    # where the demo's few minutes matter
    "probe_num_classes",
    "probe_class_names",
    "probe_label_map",
    "probe_interval",
    # the fine-tuning's augmentation, Dice reduction and clean-up: chosen on each data set's validation patients
    "rotate_degrees",
    "scale_range",
    "affine_prob",
    "dice_batch",
    "keep_largest_component",
}


def test_generated_configs_are_in_sync():
    result = subprocess.run([sys.executable, str(GENERATE), "--check"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("bundle", BUNDLES)
def test_every_workflow_has_one_source(bundle):
    generated = sorted(WORKFLOWS + ["logging.conf", "recipes"])
    assert sorted(p.name for p in (SOURCES / "common").iterdir()) == generated
    hand_written = {p.name for p in (REPO / "bundles" / bundle / "configs").iterdir()} - set(generated)
    assert hand_written <= {"metadata.json", "demo.json"}, hand_written


@pytest.mark.parametrize("config", ["inference.json", "train.json"])
def test_check_names_a_config_edited_by_hand(config, tmp_path):
    bundles = tmp_path / "bundles"
    shutil.copytree(REPO / "bundles", bundles)
    target = bundles / "gcl_prostate" / "configs" / config
    content = json.loads(target.read_text())
    content["num_classes"] = 5
    target.write_text(json.dumps(content, indent=4))
    check = [sys.executable, str(GENERATE), "--check", "--bundles", str(bundles)]
    result = subprocess.run(check, capture_output=True, text=True)
    assert result.returncode == 1 and f"gcl_prostate/configs/{config} differs" in result.stderr
    subprocess.run([sys.executable, str(GENERATE), "--bundles", str(bundles)], check=True)  # regenerate
    assert subprocess.run(check).returncode == 0
    assert json.loads(target.read_text())["num_classes"] == 3


@pytest.mark.parametrize("config", WORKFLOWS)
def test_bundles_set_only_dataset_values(config):
    common = json.loads((SOURCES / "common" / config).read_text())
    for bundle in BUNDLES:
        values = SOURCES / bundle / config
        own = json.loads(values.read_text()) if values.is_file() else {}
        assert set(own) <= DATASET_KEYS, f"{values}: {sorted(set(own) - DATASET_KEYS)} are workflow keys"
        generated = json.loads((REPO / "bundles" / bundle / "configs" / config).read_text())
        assert {k: generated[k] for k in own} == own
        assert {k: v for k, v in generated.items() if k not in own} == {k: v for k, v in common.items() if k not in own}


def test_a_key_only_one_bundle_has_sits_where_it_is_first_used():
    """gcl_demo's phantom settings come just before ``dataset_dir``, which generates the phantom from them."""
    keys = list(json.loads((REPO / "bundles" / "gcl_demo" / "configs" / "pretrain.json").read_text()))
    assert keys.index("num_patients") < keys.index("data_seed") < keys.index("dataset_dir")
    assert keys.index("dataset_dir") == keys.index("data_seed") + 1


# the recipe keys a bundle may set for itself: values chosen on that data set's validation patients
RECIPE_DATASET_KEYS = {"image_size"}


def test_a_bundles_value_of_a_recipe_key_is_merged_over_the_common_recipe(tmp_path, monkeypatch):
    sys.path.insert(0, str(SOURCES))
    try:
        import generate
    finally:
        sys.path.remove(str(SOURCES))
    sources = tmp_path / "bundle_sources"
    (sources / "common" / "recipes").mkdir(parents=True)
    (sources / "common" / "recipes" / "fit.json").write_text('{"batch_size": 20, "image_size": [128, 128], "lr": 1}')
    (sources / "ours" / "recipes").mkdir(parents=True)
    (sources / "ours" / "recipes" / "fit.json").write_text('{"image_size": [192, 192]}')
    (sources / "theirs").mkdir()
    monkeypatch.setattr(generate, "SOURCES", sources)
    out = generate.generated_configs(tmp_path / "bundles")
    ours = out[tmp_path / "bundles" / "ours" / "configs" / "recipes" / "fit.json"]
    assert ours == {"batch_size": 20, "image_size": [192, 192], "lr": 1}
    assert list(ours) == ["batch_size", "image_size", "lr"]  # the common recipe's order
    theirs = out[tmp_path / "bundles" / "theirs" / "configs" / "recipes" / "fit.json"]
    assert theirs == {"batch_size": 20, "image_size": [128, 128], "lr": 1}
    (sources / "ours" / "recipes" / "fti.json").write_text('{"image_size": [192, 192]}')  # no such common recipe
    with pytest.raises(ValueError, match=r"ours/recipes/fti.json: no common recipe fti.json"):
        generate.generated_configs(tmp_path / "bundles")


def test_bundles_set_only_dataset_values_of_a_recipe():
    own_files = sorted(p for p in SOURCES.glob("*/recipes/*.json") if p.parent.parent.name != "common")
    assert SOURCES / "gcl_acdc" / "recipes" / "finetune_fullsup.json" in own_files  # ACDC's 192 x 192 grid
    for values in own_files:
        own = json.loads(values.read_text())
        assert set(own) <= RECIPE_DATASET_KEYS, f"{values}: {sorted(set(own) - RECIPE_DATASET_KEYS)} are recipe keys"
        common = json.loads((SOURCES / "common" / "recipes" / values.name).read_text())
        generated = json.loads(
            (REPO / "bundles" / values.parent.parent.name / "configs" / "recipes" / values.name).read_text()
        )
        assert generated == {**common, **own}


def test_acdc_fine_tunes_its_full_supervision_on_the_192_grid_it_chose():
    """Round 8 of issue 53 chose 192 x 192 on ACDC's validation folds; the other bundles keep their train.json grid."""

    def recipe(bundle):
        return json.loads((REPO / "bundles" / bundle / "configs" / "recipes" / "finetune_fullsup.json").read_text())

    assert recipe("gcl_acdc")["image_size"] == [192, 192]
    for bundle in set(BUNDLES) - {"gcl_acdc"}:
        assert "image_size" not in recipe(bundle), bundle
