import torch

from gcl_monai.transforms.device_generators import DeviceGenerators


def test_seeded_generator_is_created_once_per_device_and_reproduces_the_stream():
    generators = DeviceGenerators(seed=7)
    first = generators(torch.device("cpu"))
    assert generators("cpu") is first  # one generator per device, kept between calls
    drawn = torch.rand(5, generator=first)
    expected = torch.rand(5, generator=torch.Generator().manual_seed(7))
    assert torch.equal(drawn, expected)
    assert not torch.equal(torch.rand(5, generator=generators("cpu")), expected)  # the stream goes on


def test_no_seed_hands_out_torchs_default_generator():
    assert DeviceGenerators(seed=None)(torch.device("cpu")) is None
