"""Custom ignite events of the GCL pre-training iteration."""

from ignite.engine import EventEnum

__all__ = ["GCLEvents"]


class GCLEvents(EventEnum):
    """
    ``GRADIENTS_COMPUTED``: the per-meta-label gradients are in ``engine.state.task_grads`` (a list, one per meta
    label, of lists of tensors aligned with ``engine.state.task_params``). A gradient combiner handler (for example
    :py:class:`gcl_monai.handlers.GradMitigatorHandler`) must turn them into ``param.grad`` and set
    ``engine.state.task_grads`` to None before the optimizer steps.
    """

    GRADIENTS_COMPUTED = "gradients_computed"
