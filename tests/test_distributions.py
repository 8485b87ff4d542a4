"""Action heads (fhc_jax.algos.core.distributions) against independent references: distrax's
MultivariateNormalDiag and Categorical, scipy's normal density, and sampling statistics."""

from __future__ import annotations

import math

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import fhc_jax as fhc
from fhc_jax.algos.core.distributions import LOG_STD_MAX, LOG_STD_MIN, Categorical, DiagonalGaussian, action_head
from fhc_jax.envs.spaces import Box, Discrete

LOW, HIGH = (-1.0, 0.0, -3.0), (1.0, 4.0, 1.0)


def _outputs(seed: int, n: int = 64, d: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 0.8, (n, 2 * d)).astype(np.float32)


def _reference(head: DiagonalGaussian, out: np.ndarray) -> distrax.MultivariateNormalDiag:
    """The Gaussian of ``out`` built independently of the head's code."""
    low, high = np.asarray(head.low), np.asarray(head.high)
    center, half = (low + high) / 2, (high - low) / 2
    d = head.dim
    s = np.clip(out[:, d:], LOG_STD_MIN - head.initial_log_std, LOG_STD_MAX - head.initial_log_std)
    mean = center + half * out[:, :d]
    std = half * np.exp(head.initial_log_std + s)
    return distrax.MultivariateNormalDiag(jnp.asarray(mean), jnp.asarray(std))


@pytest.mark.parametrize("state_dependent", [False, True])
def test_gaussian_log_prob_entropy_kl_match_distrax(state_dependent):
    head = DiagonalGaussian(LOW, HIGH, math.log(0.3), state_dependent)
    out_p, out_q = _outputs(0), _outputs(1)
    p, q = _reference(head, out_p), _reference(head, out_q)
    actions = np.random.default_rng(2).normal(0.0, 2.0, (64, 3)).astype(np.float32)  # beyond the box too
    np.testing.assert_allclose(head.log_prob(out_p, actions), p.log_prob(actions), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(head.entropy(out_p), p.entropy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(head.kl(out_p, out_q), p.kl_divergence(q), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(head.kl(out_p, out_p), 0.0, atol=1e-6)


def test_gaussian_log_prob_matches_scipy_and_clips_log_std():
    head = DiagonalGaussian((-2.0,), (2.0,), 0.0)
    out = np.array([[0.25, 0.0], [0.0, 50.0], [0.0, -50.0]], np.float32)  # s far beyond the bounds
    mean, log_std = head.mean_log_std(out)
    np.testing.assert_allclose(mean[:, 0], [0.5, 0.0, 0.0])
    np.testing.assert_allclose(
        log_std[:, 0], [math.log(2.0), math.log(2.0) + LOG_STD_MAX, math.log(2.0) + LOG_STD_MIN], rtol=1e-6
    )
    a = np.array([[1.3], [-0.4], [0.01]], np.float32)
    ref = stats.norm.logpdf(a[:, 0], np.asarray(mean)[:, 0], np.exp(np.asarray(log_std))[:, 0])
    np.testing.assert_allclose(head.log_prob(out, a), ref, rtol=1e-5)


def test_gaussian_mean_excess_counts_only_the_mean_beyond_the_box():
    """sum_d max(|m_d| - 1, 0)^2 of the mean outputs m (units of the half range), whatever the
    log-std outputs and the box's centre."""
    head = DiagonalGaussian(LOW, HIGH)
    out = np.array([[0.5, -1.0, 1.0, 9.0, 9.0, 9.0], [1.5, -3.0, 0.2, -9.0, 0.0, 0.0]], np.float32)
    np.testing.assert_allclose(head.mean_excess(out), [0.0, 0.25 + 4.0], rtol=1e-6)


def test_categorical_matches_distrax():
    head = Categorical(5)
    logits_p, logits_q = _outputs(3, d=5)[:, :5] * 3, _outputs(4, d=5)[:, :5] * 3
    p, q = distrax.Categorical(logits=logits_p), distrax.Categorical(logits=logits_q)
    a = np.random.default_rng(5).integers(0, 5, 64)
    np.testing.assert_allclose(head.log_prob(logits_p, a), p.log_prob(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(head.entropy(logits_p), p.entropy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(head.kl(logits_p, logits_q), p.kl_divergence(q), rtol=1e-4, atol=1e-6)


def test_gaussian_policy_samples_the_head_distribution():
    """The policy's draws have the head's mean and standard deviation (4 sigma of the
    sampling error at n = 20000), unclipped; deterministic plays the mean."""
    head = DiagonalGaussian(LOW, HIGH, math.log(0.5))
    out = jnp.asarray(_outputs(6, n=1)[0])
    policy = head.policy(lambda obs, h: out)
    keys = jax.random.split(jax.random.key(0), 20_000)
    draws = np.asarray(jax.vmap(lambda k: policy(k, jnp.zeros(2), 0))(keys))
    mean, log_std = (np.asarray(x) for x in head.mean_log_std(out))
    std = np.exp(log_std)
    assert draws.dtype == np.float32 and draws.shape == (20_000, 3)
    assert np.all(np.abs(draws.mean(0) - mean) < 4 * std / np.sqrt(20_000))
    assert np.all(np.abs(draws.std(0) / std - 1) < 4 / np.sqrt(2 * 20_000))
    assert (draws < np.asarray(LOW)).any() or (draws > np.asarray(HIGH)).any()  # recorded unclipped
    np.testing.assert_allclose(head.policy(lambda o, h: out, deterministic=True)(keys[0], None, 0), mean)


def test_action_head_follows_the_action_space():
    assert action_head(fhc.GridWorld()) == Categorical(9)

    class BoxGrid(fhc.GridWorld):
        action_space = property(lambda self: Box((-1.0, -2.0), (1.0, 2.0)))

    head = action_head(BoxGrid(), "state_dependent", -1.0)
    assert head == DiagonalGaussian((-1.0, -2.0), (1.0, 2.0), -1.0, True)
    assert head.network_outputs == (4, 0) and DiagonalGaussian((0.0,), (1.0,)).network_outputs == (1, 1)
    with pytest.raises(ValueError, match="log_std must be"):
        action_head(BoxGrid(), "learned")
    with pytest.raises(ValueError, match=r"initial_log_std must be in \[-5.0, 1.0\]"):
        action_head(BoxGrid(), "state_independent", 3.0)


def test_spaces_validate():
    with pytest.raises(ValueError, match="low must be < high"):
        Box((0.0,), (0.0,))
    with pytest.raises(ValueError, match="finite"):
        Box((-np.inf,), (1.0,))
    with pytest.raises(ValueError, match="one length"):
        Box((0.0, 1.0), (1.0,))
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        Discrete(0)
    box = Box((-1.0, 0.0), (1.0, 2.0))
    np.testing.assert_allclose(box.clip(jnp.array([5.0, -3.0])), [1.0, 0.0])
    assert box.shape == (2,) and Box((-1.0,), (1.0,)) == Box([-1], [1])  # hashable, normalised
