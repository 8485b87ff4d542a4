"""Action distributions of the neural learners ("heads"): what a network's output vector means.

A learner's actor network maps an observation of stage h to an output vector ``out`` of
``head.num_outputs`` numbers; the head turns it into a distribution over the environment's
actions, with its log-probability, entropy, KL divergence and a sampling policy for
:func:`fhc_jax.rollout`. Learners never look inside ``out``, so the same learner code serves
discrete and box action spaces.

* :class:`Categorical` (``Discrete(A)``): ``out`` = A logits, pi(a) = softmax(out)_a.
* :class:`DiagonalGaussian` (``Box(low, high)``, d dimensions): ``out`` = 2d numbers,
  ``[m, s]``; the action is a ~ N(mu, diag(sigma^2)) with

      mu    = center + half_range * m,
      sigma = half_range * exp(initial_log_std + clip(s, LOG_STD_MIN - initial_log_std,
                                                      LOG_STD_MAX - initial_log_std)),

  in the environment's units (center and half_range of the box). With a state-independent
  log-std (the default of the learners) the actor network outputs m and holds s as a free
  per-stage parameter vector; state-dependent, the network outputs both.

**Clipped, not squashed.** The environment clips the action into the box
(``fhc_jax.envs.spaces.Box.clip``); the trajectory records the Gaussian sample before clipping
and every log-probability, entropy and KL is that of the unclipped Gaussian. The policy the
learners optimise is therefore exactly the Gaussian (the clipping is part of the environment's
dynamics), so the score function, the likelihood ratios of PPO/e-COP and the KL of CPO's trust
region need no correction. A tanh-squashed policy would need the change-of-variables term
-sum_d log(1 - tanh(u_d)^2) and has no closed-form entropy; clipping keeps every quantity in
closed form. The cost: mass beyond the bounds all plays the boundary action, so a policy that
wants the boundary pushes its mean beyond it (harmless: the log-std keeps exploring).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fhc_jax.algos.core.policies import softmax_policy
from fhc_jax.envs.spaces import Box

Array = jax.Array

#: log-std bounds (in units of the box's half range): sigma in [e^-5, e^1] x half_range
LOG_STD_MIN, LOG_STD_MAX = -5.0, 1.0

#: the choices of a neural learner's ``Config.log_std``
LOG_STD_FORMS = ("state_independent", "state_dependent")

_LOG_2PI = math.log(2.0 * math.pi)


@dataclasses.dataclass(frozen=True)
class Categorical:
    """pi(a | out) = softmax(out)_a over A actions; ``out`` (..., A) logits."""

    num_actions: int

    @property
    def num_outputs(self) -> int:
        return self.num_actions

    @property
    def network_outputs(self) -> tuple[int, int]:
        """(outputs computed from the input, free per-stage outputs) of the actor network."""
        return self.num_actions, 0

    def log_prob(self, out: Array, action: Array) -> Array:
        """log pi(action | out), (...,); ``action`` integer (...)."""
        logp = jax.nn.log_softmax(out, axis=-1)
        return jnp.take_along_axis(logp, jnp.asarray(action, jnp.int32)[..., None], axis=-1)[..., 0]

    def entropy(self, out: Array) -> Array:
        """-sum_a pi(a) log pi(a), (...,)."""
        logp = jax.nn.log_softmax(out, axis=-1)
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)

    def kl(self, out_p: Array, out_q: Array) -> Array:
        """KL(pi_p || pi_q) = sum_a p(a) (log p(a) - log q(a)), (...,)."""
        logp = jax.nn.log_softmax(out_p, axis=-1)
        logq = jax.nn.log_softmax(out_q, axis=-1)
        return jnp.sum(jnp.exp(logp) * (logp - logq), axis=-1)

    def policy(self, out_fn: Callable[[Array, Array], Array]):
        """``act(key, observation, h)`` sampling softmax(``out_fn(observation, h)``) with one
        uniform per step (:func:`fhc_jax.softmax_policy`, the rollout's fast protocol)."""
        return softmax_policy(out_fn)


@dataclasses.dataclass(frozen=True)
class GaussianPolicy:
    """a ~ N(mu, sigma^2) from ``out_fn(observation, h)`` (see :class:`DiagonalGaussian`);
    hashable when ``out_fn`` is. ``deterministic=True`` plays the mean."""

    head: DiagonalGaussian
    out_fn: Callable[[Array, Array], Array]
    deterministic: bool = False

    def __call__(self, key: Array, observation: Any, h: Array) -> Array:
        out = self.out_fn(observation, h)
        mean, log_std = self.head.mean_log_std(out)
        if self.deterministic:
            return mean
        return mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)


@dataclasses.dataclass(frozen=True)
class DiagonalGaussian:
    """Diagonal Gaussian over a box of d dimensions; ``out`` (..., 2d) = [m, s] (module
    docstring for the parametrisation).

    Attributes:
        low, high: the box's bounds (tuples of d floats).
        initial_log_std: log(sigma / half_range) where s = 0 (the initial exploration).
        state_dependent_std: whether the actor network computes s from the input (else s is a
            free per-stage parameter vector, the network computes only m).
    """

    low: tuple[float, ...]
    high: tuple[float, ...]
    initial_log_std: float = math.log(0.5)
    state_dependent_std: bool = False

    @property
    def dim(self) -> int:
        return len(self.low)

    @property
    def num_outputs(self) -> int:
        return 2 * self.dim

    @property
    def network_outputs(self) -> tuple[int, int]:
        """(outputs computed from the input, free per-stage outputs) of the actor network."""
        return (2 * self.dim, 0) if self.state_dependent_std else (self.dim, self.dim)

    def _affine(self) -> tuple[Array, Array]:
        low, high = np.asarray(self.low, np.float32), np.asarray(self.high, np.float32)
        return jnp.asarray((low + high) / 2), jnp.asarray((high - low) / 2)

    def mean_log_std(self, out: Array) -> tuple[Array, Array]:
        """(mu (..., d), log sigma (..., d)) in the environment's units."""
        d = self.dim
        center, half = self._affine()
        s = jnp.clip(out[..., d:], LOG_STD_MIN - self.initial_log_std, LOG_STD_MAX - self.initial_log_std)
        return center + half * out[..., :d], jnp.log(half) + self.initial_log_std + s

    def mean_excess(self, out: Array) -> Array:
        """sum_d max(|m_d| - 1, 0)^2, how far the mean lies beyond the box (m in units of the
        half range), (...,): a penalty that keeps the mean where the advantages still move it."""
        return jnp.sum(jnp.square(jnp.maximum(jnp.abs(out[..., : self.dim]) - 1.0, 0.0)), axis=-1)

    def log_prob(self, out: Array, action: Array) -> Array:
        """log N(action; mu, sigma^2) of the unclipped action (..., d), summed over d, (...,)."""
        mean, log_std = self.mean_log_std(out)
        z = (jnp.asarray(action, mean.dtype) - mean) * jnp.exp(-log_std)
        return jnp.sum(-0.5 * z * z - log_std - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self, out: Array) -> Array:
        """sum_d (log sigma_d + (1 + log 2 pi) / 2), (...,)."""
        _, log_std = self.mean_log_std(out)
        return jnp.sum(log_std + 0.5 * (1.0 + _LOG_2PI), axis=-1)

    def kl(self, out_p: Array, out_q: Array) -> Array:
        """KL(N_p || N_q) = sum_d [log(sigma_q / sigma_p) + (sigma_p^2 + (mu_p - mu_q)^2)
        / (2 sigma_q^2) - 1/2], (...,)."""
        mp, lp = self.mean_log_std(out_p)
        mq, lq = self.mean_log_std(out_q)
        ratio = jnp.exp(2.0 * (lp - lq))
        return jnp.sum(lq - lp + 0.5 * (ratio + jnp.square(mp - mq) * jnp.exp(-2.0 * lq)) - 0.5, axis=-1)

    def policy(self, out_fn: Callable[[Array, Array], Array], deterministic: bool = False) -> GaussianPolicy:
        """``act(key, observation, h) -> (d,)`` float32 sampling N(mu, sigma^2) of
        ``out_fn(observation, h)`` (d normal draws per step; the environment clips)."""
        return GaussianPolicy(self, out_fn, deterministic)


ActionHead = Categorical | DiagonalGaussian


def check_initial_log_std(config: Any) -> None:
    """Raise ``ValueError`` unless ``config.initial_log_std`` lies in [LOG_STD_MIN, LOG_STD_MAX]
    = [-5, 1] (a neural learner's ``Config.__post_init__``; the type is checked by the field's
    declaration)."""
    from fhc_jax.algos.core.hyperparameters import check_interval

    check_interval("Config", "initial_log_std", config.initial_log_std, LOG_STD_MIN, LOG_STD_MAX)


def action_head(env, log_std: str = "state_independent", initial_log_std: float = math.log(0.5)) -> ActionHead:
    """The head of ``env``'s action space: :class:`Categorical` for ``Discrete(A)``,
    :class:`DiagonalGaussian` for a ``Box`` (``log_std``: "state_independent" or
    "state_dependent"; ``initial_log_std``: log(sigma / half_range) at initialisation)."""
    space = env.action_space
    if isinstance(space, Box):
        if log_std not in LOG_STD_FORMS:
            raise ValueError(f"log_std must be 'state_independent' or 'state_dependent', found {log_std!r}")
        if not (LOG_STD_MIN <= float(initial_log_std) <= LOG_STD_MAX):
            raise ValueError(f"initial_log_std must be in [{LOG_STD_MIN}, {LOG_STD_MAX}], found {initial_log_std!r}")
        return DiagonalGaussian(space.low, space.high, float(initial_log_std), log_std == "state_dependent")
    return Categorical(space.n)


def config_head(env, spec: Any) -> ActionHead:
    """:func:`action_head` of ``env`` with the ``log_std`` and ``initial_log_std`` fields of
    ``spec``: a :class:`~fhc_jax.algos.core.networks.NetworkSpec` (a neural learner's train state
    records one to rebuild its policy) or a neural learner's ``Config``."""
    return action_head(env, spec.log_std, spec.initial_log_std)
