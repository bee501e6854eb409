"""Fixtures of the tests of gcl_monai.probe: the probe command run on the phantom for a random and a labelled encoder
(once a session: test_probe_main.py and test_table.py read the same runs)."""

import pytest

from gcl_monai.probe.__main__ import probe_command
from tests.bundles.test_bundles import DEMO
from tests.probe.probe_helpers import PROBE_TINY, _supervised_encoder


@pytest.fixture(scope="session")
def probed(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe")
    supervised = root / "supervised.pt"
    _supervised_encoder(root, supervised)
    common = {"config_file": str(DEMO / "pretrain.json"), "bundle_root": str(root), **PROBE_TINY}
    random_a = probe_command(encoder="random", output_dir=str(root / "random_a"), **common)
    random_b = probe_command(encoder="random", output_dir=str(root / "random_b"), **common)
    labelled = probe_command(encoder=str(supervised), output_dir=str(root / "supervised"), **common)
    test = probe_command(encoder=str(supervised), output_dir=str(root / "test"), eval="test", **common)
    return root, random_a, random_b, labelled, test
