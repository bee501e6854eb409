"""A bundle's on/off switches (gcl_monai.bundle.run_options), the part tests/bundles/test_bundle_setup.py leaves out:
if_enabled passes a component through or switches it off."""

from gcl_monai.bundle import first_enabled, if_enabled


def test_if_enabled_keeps_the_component_only_when_its_switch_is_on():
    component = object()
    assert if_enabled(component, True) is component and if_enabled(component, False) is None
    assert first_enabled(if_enabled(component, False), "fallback") == "fallback"  # as a config pairs them
