"""What the tests of gcl_monai.networks share besides fixtures (those are in conftest.py)."""

#: the widths of the kept encoders' networks (BasicUNet's six feature counts)
FEATURES = (8, 8, 16, 16, 32, 8)
