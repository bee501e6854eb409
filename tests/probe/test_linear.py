"""The linear probe: a class-balanced, seeded pixel sample, and the fitted pipeline as one linear map."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from gcl_monai.probe import sample_pixels
from gcl_monai.probe.linear import _linear_map
from tests.probe.probe_helpers import _volume


def test_sample_pixels_is_class_balanced_seeded_and_takes_all_of_a_rare_class():
    a = np.zeros((2, 4, 4), dtype=int)
    a[0, :2] = 1  # 8 pixels of class 1
    a[1, 0, 0] = 2  # 1 pixel of class 2
    b = np.ones((1, 4, 4), dtype=int)  # 16 more of class 1
    vols = [_volume("p1", a), _volume("p2", b)]
    picked = sample_pixels(vols, (4, 4), 3, pixels_per_class=5, seed=3)
    labels = np.concatenate([v.label.flatten().numpy()[i] for v, i in zip(vols, picked)])
    assert np.bincount(labels, minlength=3).tolist() == [5, 5, 1]
    again = sample_pixels(vols, (4, 4), 3, pixels_per_class=5, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(picked, again))
    assert any(not np.array_equal(x, y) for x, y in zip(picked, sample_pixels(vols, (4, 4), 3, 5, seed=4)))


@pytest.mark.parametrize("num_classes", [2, 4])
def test_the_probe_as_one_linear_map_equals_the_fitted_pipeline(num_classes):
    rng = np.random.default_rng(0)
    x = rng.normal(2.0, 3.0, size=(400, 6))
    y = rng.integers(0, num_classes, 400)
    x[:, 0] += y  # something to learn
    probe = make_pipeline(StandardScaler(), LogisticRegression()).fit(x, y)
    weight, bias = _linear_map(probe)
    scores = x @ weight.double().numpy().T + bias.double().numpy()
    assert np.array_equal(scores.argmax(1), probe.predict(x))
    expected = probe.decision_function(x)
    if num_classes == 2:
        np.testing.assert_allclose(scores[:, 1] - scores[:, 0], expected, rtol=1e-4, atol=1e-4)
    else:
        np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-4)
