"""The bundles' configs that have a source in ``bundle_sources/`` are exactly what the source generates: the
workflow written once (``common/``) merged with each bundle's dataset values by MONAI's multi-file merge."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
GENERATE = REPO / "bundle_sources" / "generate.py"


def test_generated_configs_are_in_sync():
    result = subprocess.run([sys.executable, str(GENERATE), "--check"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr


def test_check_names_a_config_edited_by_hand(tmp_path):
    bundles = tmp_path / "bundles"
    shutil.copytree(REPO / "bundles", bundles)
    target = bundles / "gcl_prostate" / "configs" / "inference.json"
    config = json.loads(target.read_text())
    config["num_classes"] = 5
    target.write_text(json.dumps(config, indent=4))
    check = [sys.executable, str(GENERATE), "--check", "--bundles", str(bundles)]
    result = subprocess.run(check, capture_output=True, text=True)
    assert result.returncode == 1 and "gcl_prostate/configs/inference.json differs" in result.stderr
    subprocess.run([sys.executable, str(GENERATE), "--bundles", str(bundles)], check=True)  # regenerate
    assert subprocess.run(check).returncode == 0
    assert json.loads(target.read_text())["num_classes"] == 3


def test_dataset_values_override_the_common_workflow():
    common = json.loads((REPO / "bundle_sources" / "common" / "inference.json").read_text())
    for values in sorted((REPO / "bundle_sources").glob("gcl_*/inference.json")):
        config = json.loads((REPO / "bundles" / values.parent.name / "configs" / "inference.json").read_text())
        own = json.loads(values.read_text())
        assert set(own) <= set(common)  # a bundle only sets values; the workflow keys come from common/
        assert {k: config[k] for k in own} == own
        assert {k: v for k, v in config.items() if k not in own} == {k: v for k, v in common.items() if k not in own}
