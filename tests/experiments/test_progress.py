"""The experiments' log into a ``progress.log`` (:py:mod:`experiments.progress`): written inside, left alone after."""

import logging

import pytest

from experiments.progress import Progress, hms, logged_to, logger


def test_logged_to_writes_the_experiments_log_inside_and_nothing_after(tmp_path):
    log_file = tmp_path / "progress.log"
    handlers = list(logger.handlers)
    with logged_to(log_file):
        logger.info("cell 1 of 2: starting")
        logger.debug("not at INFO")
    logger.info("after the block")
    lines = log_file.read_text().splitlines()
    assert len(lines) == 1 and lines[0].endswith(" - INFO - cell 1 of 2: starting")
    assert logger.handlers == handlers


def test_progress_as_a_context_manager_removes_its_handler_when_the_run_fails(tmp_path):
    log_file = tmp_path / "progress.log"
    handlers = list(logger.handlers)
    with pytest.raises(RuntimeError, match="a cell failed"), Progress([], log_file) as progress:
        assert isinstance(progress, Progress)
        assert any(isinstance(h, logging.FileHandler) for h in logger.handlers)
        logger.warning("before the failure")
        raise RuntimeError("a cell failed")
    assert logger.handlers == handlers
    assert log_file.read_text().splitlines()[0].endswith(" - WARNING - before the failure")
    assert progress.eta() == "0:00:00"  # no cell left


def test_hms_rounds_to_the_second():
    assert hms(3723.4) == "1:02:03"
    assert hms(59.6) == "0:01:00"
    assert hms(90061) == "25:01:01"
