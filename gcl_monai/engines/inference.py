"""Inference over a folder of cases: every readable case is segmented and written, every failure is reported by
file name, and the run fails at the end when any case failed."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from monai.data import DataLoader, Dataset
from monai.engines import Evaluator

__all__ = ["CasesFailed", "segment_each_case"]

logger = logging.getLogger("gcl_monai.engines")


class CasesFailed(RuntimeError):
    """Some cases of an inference run could not be segmented; the others were written.

    Attributes:
        failures: ``(case, reason)`` for each failed case.
    """

    def __init__(self, failures: Sequence[tuple[str, str]], total: int):
        self.failures = list(failures)
        lines = "\n".join(f"  - {case}: {reason}" for case, reason in self.failures)
        super().__init__(
            f"{len(self.failures)} of {total} case(s) could not be segmented (the other {total - len(self.failures)} "
            f"were written):\n{lines}"
        )


def _case_name(item: dict) -> str:
    return str(item.get("case", item.get("image"))) + (f" (frame {item['frame']})" if "frame" in item else "")


def _reason(error: BaseException) -> str:
    """The innermost message of an error that MONAI wrapped (``applying transform ...``)."""
    while error.__cause__ is not None:
        error = error.__cause__
    return f"{type(error).__name__}: {error}"


def segment_each_case(evaluator: Evaluator, dataset: Dataset) -> None:
    """
    Runs ``evaluator`` (its network, inferer, post-processing and writer) on each case of ``dataset`` in turn. A
    case whose loading or pre-processing fails (unreadable file, 4D series without a frame, no finite voxel) is
    logged with its file name and skipped; the others are still segmented and written. A case the datalist already
    marks ``"skipped"`` (a DICOM stack with a missing slice, for example) is reported with that reason, unread.

    Args:
        evaluator: the bundle's evaluator; its data loader is replaced by one case at a time.
        dataset: the cases (a datalist with the pre-processing transform).

    Raises:
        CasesFailed: after all cases ran, when any failed; its message lists each failed file and why
            (``python -m monai.bundle run`` then exits with a non-zero status).

    Example:
        In a bundle's ``inference.json``: ``"run": ["$gcl_monai.engines.segment_each_case(@evaluator, @dataset)"]``.
    """
    failures = []
    for index in range(len(dataset)):
        item = dataset.data[index]
        if item.get("skipped"):
            failures.append((_case_name(item), str(item["skipped"])))
            logger.error("%s: not segmented: %s", _case_name(item), failures[-1][1])
            continue
        try:
            case = dataset[index]
        except Exception as error:  # any loading or pre-processing error of this case: reported, the rest runs
            failures.append((_case_name(item), _reason(error)))
            logger.error("%s: not segmented: %s", _case_name(item), failures[-1][1])
            continue
        evaluator.data_loader = DataLoader([case], batch_size=1, num_workers=0)
        evaluator.state.epoch_length = 1
        evaluator.run()
    if failures:
        raise CasesFailed(failures, len(dataset))
    logger.info("Segmented %d case(s).", len(dataset))
