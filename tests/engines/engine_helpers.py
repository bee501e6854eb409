"""A tiny GCL pre-training run on random views, shared by the tests of the trainer and of the handlers it runs with."""

import torch

from gcl_monai.engines import GCLPretrainer
from gcl_monai.gradients import GradMitigator, MeanCombiner
from gcl_monai.handlers import EmbeddingSpread, EpochSeedHandler, GradFilterPaceHandler, GradientCombinerHandler
from gcl_monai.losses import GradFilter, PixelContrastiveLoss
from gcl_monai.networks import GCLNet

FEATURES = (4, 4, 8, 8, 16, 4)


class RandomViews(torch.utils.data.Dataset):
    """Slices with two views and three meta labels; the views are drawn from the global torch RNG."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return {
            "image": torch.rand(1, 32, 32),
            "image_2": torch.rand(1, 32, 32),
            "patient_id": torch.tensor(i % 3),
            "slice_quantile": torch.tensor(i % 4 + 1),
            "organ_state": torch.tensor(i % 2),
        }


def build(
    meta_labels=("patient_id", "slice_quantile", "organ_state"),
    combiner="mitigator",
    pixel=True,
    ckpt=None,
    device_views=None,
):
    torch.manual_seed(0)
    net = GCLNet(features=FEATURES, proj_dim=8)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loader = torch.utils.data.DataLoader(RandomViews(), batch_size=4, shuffle=True)
    grad_filter = GradFilter() if pixel else None
    comb = GradMitigator(len(meta_labels)) if combiner == "mitigator" else MeanCombiner(len(meta_labels))
    combiner_handler = GradientCombinerHandler(comb)
    trainer = GCLPretrainer(
        device="cpu",
        max_epochs=3,
        train_data_loader=loader,
        network=net,
        optimizer=opt,
        meta_labels=list(meta_labels),
        pixel_loss=PixelContrastiveLoss(temperature=0.1, topk_ratio=0.3) if pixel else None,
        grad_filter=grad_filter,
        device_views=device_views,
    )
    handlers = [combiner_handler, EmbeddingSpread(), EpochSeedHandler(seed=7)]
    if pixel:
        handlers.append(GradFilterPaceHandler(grad_filter))
    for h in handlers:
        h.attach(trainer)
    save_dict = {"network": net, "optimizer": opt, "trainer": trainer, "mitigator": comb}
    if pixel:
        save_dict["grad_filter"] = grad_filter
    return trainer, net, save_dict
