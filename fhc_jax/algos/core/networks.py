"""Neural networks of the deep learners (flax.linen), and per-stage stacks of them.

* :class:`MLP`: fully connected, ``depth`` hidden layers of ``width`` units, configurable
  activation, a linear output layer. The paper's NN-Constrained networks are
  ``MLP(width=10, depth=2, activation="tanh")`` on the 2-d coordinates ("Env 1").
* :class:`Stacked`: ONE module whose parameters carry a leading stage axis L (L = H for the
  actors, H + 1 for the critics): ``init`` and ``apply`` are ``jax.vmap`` over that axis, so
  stage h's parameters are applied to the batch of inputs seen at stage h, and all stages run
  as one batched computation (no Python list of H networks).
* :class:`NetworkSpec`: the networks' shape as a neural learner's train state records it
  (input, width, depth, activation, input standardisation, Gaussian head form), one static
  field from which the policy is rebuilt.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from fhc_jax.algos.core.distributions import LOG_STD_FORMS
from fhc_jax.algos.core.hyperparameters import RunConfig, static

Array = jax.Array

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "tanh": jnp.tanh,
    "relu": jax.nn.relu,
    "elu": jax.nn.elu,
    "gelu": jax.nn.gelu,
    "silu": jax.nn.silu,
}


class MLP(nn.Module):
    """x (..., D) -> (..., outputs): ``depth`` hidden layers of ``width`` units, then linear.

    Hidden layers use LeCun-normal weights (flax's default), zero biases; the output layer is
    scaled by ``output_scale`` (small values start a softmax policy near uniform).
    ``free_outputs`` > 0 appends that many outputs that do not depend on the input: a learned
    parameter vector "free" (zeros at init), e.g. the state-independent log-std of a Gaussian
    policy (``fhc_jax.algos.core.distributions``); the output is then (..., outputs + free_outputs).
    """

    outputs: int
    width: int = 10
    depth: int = 2
    activation: str = "tanh"
    output_scale: float = 1.0
    free_outputs: int = 0

    @nn.compact
    def __call__(self, x: Array) -> Array:
        act = ACTIVATIONS[self.activation]
        h = x
        for _ in range(self.depth):
            h = act(nn.Dense(self.width)(h))
        init = nn.initializers.variance_scaling(self.output_scale**2, "fan_in", "truncated_normal")
        out = nn.Dense(self.outputs, kernel_init=init)(h)
        if self.free_outputs:
            free = self.param("free", nn.initializers.zeros, (self.free_outputs,), jnp.float32)
            out = jnp.concatenate([out, jnp.broadcast_to(free, out.shape[:-1] + (self.free_outputs,))], axis=-1)
        return out


@dataclasses.dataclass(frozen=True)
class NetworkSpec:
    """The shape of a neural learner's networks, built from its ``Config`` by :meth:`of` and
    held by its train state as one static field (frozen and hashable: part of the train
    state's tree structure, never a leaf), so the policy can be rebuilt from the state alone.

    Attributes:
        observation: the resolved network input (``Config.observation`` with "auto" resolved
            on the environment; Saute-Lagrangian: the input of the base state).
        width, depth, activation: every MLP of the learner (:class:`MLP`).
        normalize_inputs: the inputs are standardised by a fixed affine map (NN-Constrained,
            e-COP); False for learners whose ``Config`` has no such field.
        log_std: box action spaces only: "state_independent" or "state_dependent", the form of
            the Gaussian head's log-std (``fhc_jax.algos.core.distributions.config_head``).
        initial_log_std: box action spaces only: log(sigma / half range) of the initial policy.
        shared_stages: one network for all stages on the input with h / H appended
            (:class:`SharedAcrossStages`) instead of one per stage (NN-Constrained's
            ``shared_stages``; False for learners without the field).
    """

    observation: str = "env"
    width: int = 10
    depth: int = 2
    activation: str = "tanh"
    normalize_inputs: bool = False
    log_std: str = "state_independent"
    initial_log_std: float = math.log(0.5)
    shared_stages: bool = False

    @classmethod
    def of(cls, config: Any, **changes: Any) -> NetworkSpec:
        """The spec of a neural learner's ``config`` (its ``observation``, ``width``,
        ``depth``, ``activation``, ``log_std``, ``initial_log_std`` and, where it has one,
        ``normalize_inputs``), with ``changes`` (e.g. the resolved ``observation``) applied."""
        fields = dict(
            observation=config.observation,
            width=config.width,
            depth=config.depth,
            activation=config.activation,
            normalize_inputs=getattr(config, "normalize_inputs", False),
            shared_stages=getattr(config, "shared_stages", False),
            log_std=config.log_std,
            initial_log_std=config.initial_log_std,
        )
        return cls(**{**fields, **changes})

    def replace(self, **changes: Any) -> NetworkSpec:
        """A copy with ``changes`` (field name -> value)."""
        return dataclasses.replace(self, **changes)

    def mlp(self, outputs: int, **kw: Any) -> MLP:
        """An :class:`MLP` of this width, depth and activation with ``outputs`` outputs
        (``kw``: ``output_scale``, ``free_outputs``)."""
        return MLP(outputs=outputs, width=self.width, depth=self.depth, activation=self.activation, **kw)


@dataclasses.dataclass(frozen=True)
class Stacked:
    """L independent copies of ``module`` as one stacked parameter pytree (leading axis L).

    ``init(key, x)``: x (D,) or (B, D) a sample input; returns params whose every leaf has a
    leading axis L (each stage initialised from its own key). ``apply(params, x)``: x (L, B, D)
    (stage l's inputs) -> (L, B, outputs), one vmapped call.

    ``feature_major=True`` (an :class:`MLP` module only) computes the same function with the
    batch axis minor: every layer acts on (L, features, B) activations, transposed back to
    (L, B, outputs) at the end (:func:`mlp_feature_major`). XLA's CPU code for these narrow
    layers (D, width ~ 10) vectorises over the minor axis, so the forward pass and the gradient
    of the paper's 2-10-10-9 network on the samples of a batch run several times faster; the
    results equal ``vmap(module.apply)``'s up to float rounding (the sums over features are
    the same, but not necessarily in the same order), so the tabular paths, whose pinned
    numbers are bit-exact, keep the default.
    """

    module: nn.Module
    num_stages: int
    feature_major: bool = False

    def __post_init__(self):
        if self.feature_major and not isinstance(self.module, MLP):
            raise ValueError(f"Stacked(feature_major=True) needs an MLP module, found {type(self.module).__name__}")

    def init(self, key: Array, x: Array) -> Any:
        keys = jax.random.split(key, self.num_stages)
        return jax.vmap(lambda k: self.module.init(k, x))(keys)

    def apply(self, params: Any, x: Array) -> Array:
        if self.feature_major:
            return mlp_feature_major(self.module, params, x)
        return jax.vmap(self.module.apply)(params, x)

    def apply_columns(self, params: Any, x_t: Array) -> Array:
        """``apply`` on samples stored as columns, x_t (L, D, B) -> (L, outputs, B), without
        the transposes (feature-major stacks only): for losses that reduce over the outputs,
        which then run over a non-minor axis too."""
        if not self.feature_major:
            raise ValueError("Stacked.apply_columns needs feature_major=True")
        return mlp_columns(self.module, params, x_t)

    def apply_stage(self, params: Any, x: Array, h: Array) -> Array:
        """Stage h's network at one input x (D,) -> (outputs,) (h may be traced)."""
        return self.module.apply(jax.tree.map(lambda p: p[h], params), x)


@dataclasses.dataclass(frozen=True)
class SharedAcrossStages:
    """ONE network for all L stages, whose input is the observation with the stage's position
    h / H appended: the interface of :class:`Stacked` (``init``, ``apply`` (L, B, D) ->
    (L, B, outputs), ``apply_columns``, ``apply_stage``), but parameters without a stage axis,
    so every stage's samples train the same weights. For long horizons, where per-stage
    networks each learn from the K samples of their own stage (and a stage the policy has only
    begun to reach has learned nothing); the policy stays non-stationary through h / H.

    Attributes:
        module: the MLP (its input has D + 1 features). num_stages: L. horizon: H (the
            stage feature is l / H).
    """

    module: nn.Module
    num_stages: int
    horizon: int

    def _with_stage(self, x: Array, h: Array) -> Array:
        t = jnp.broadcast_to(jnp.asarray(h, jnp.float32) / self.horizon, x.shape[:-1])
        return jnp.concatenate([x.astype(jnp.float32), t[..., None]], axis=-1)

    def init(self, key: Array, x: Array) -> Any:
        return self.module.init(key, self._with_stage(x, 0))

    def apply(self, params: Any, x: Array) -> Array:
        stages = jnp.arange(x.shape[0]).reshape((-1,) + (1,) * (x.ndim - 2))
        return self.module.apply(params, self._with_stage(x, stages))

    def apply_columns(self, params: Any, x_t: Array) -> Array:
        return jnp.swapaxes(self.apply(params, jnp.swapaxes(x_t, 1, 2)), 1, 2)

    def apply_stage(self, params: Any, x: Array, h: Array) -> Array:
        return self.module.apply(params, self._with_stage(x, h))


UNROLL_MAX = 16  # contractions over at most this many features are unrolled (_contract)


def _contract(w: Array, h: Array) -> Array:
    """sum_d w[l, d, e] h[l, d, b] -> (L, E, B) for w (L, D, E), h (L, D, B). For D <= UNROLL_MAX
    as D fused multiply-adds of (L, E, B) planes (XLA fuses them into one loop vectorised over
    B, faster than a batched dot of these narrow shapes on CPU), else a batched dot."""
    if h.shape[1] > UNROLL_MAX:
        return jnp.einsum("lde,ldb->leb", w, h)
    acc = w[:, 0, :, None] * h[:, 0:1, :]
    for d in range(1, h.shape[1]):
        acc = acc + w[:, d, :, None] * h[:, d : d + 1, :]
    return acc


@jax.custom_vjp
def _dense(kernel: Array, bias: Array, h: Array) -> Array:
    """A stacked dense layer in the feature-major layout: kernel (L, D, E), bias (L, E),
    h (L, D, B) -> (L, E, B). Its VJP is written out (d kernel is a batched dot over B,
    d h the transposed contraction) because autodiff of the unrolled form is slow."""
    return _contract(kernel, h) + bias[:, :, None]


def _dense_fwd(kernel: Array, bias: Array, h: Array):
    return _dense(kernel, bias, h), (kernel, h)


def _dense_bwd(residuals, g: Array):
    kernel, h = residuals
    return (jnp.einsum("ldb,leb->lde", h, g), jnp.sum(g, axis=2), _contract(jnp.swapaxes(kernel, 1, 2), g))


_dense.defvjp(_dense_fwd, _dense_bwd)


def mlp_columns(module: MLP, params: Any, h: Array) -> Array:
    """Stacked :class:`MLP` parameters (leading axis L) applied to samples stored as columns:
    h (L, D, B) -> (L, outputs + free_outputs, B), each layer :func:`_dense`.

    Args:
        module: the MLP. params: its stacked parameters ({"params": {"Dense_i": {"kernel"
            (L, in, out), "bias" (L, out)}, "free" (L, free_outputs)}}).
        h: inputs, the samples of stage l as the columns of h[l], (L, D, B).
    """
    p = params["params"]
    act = ACTIVATIONS[module.activation]
    for i in range(module.depth + 1):
        dense = p[f"Dense_{i}"]
        h = _dense(dense["kernel"], dense["bias"], h)
        if i < module.depth:
            h = act(h)
    if module.free_outputs:
        h = jnp.concatenate(
            [h, jnp.broadcast_to(p["free"][:, :, None], (h.shape[0], module.free_outputs, h.shape[2]))], axis=1
        )
    return h


def mlp_feature_major(module: MLP, params: Any, x: Array) -> Array:
    """``jax.vmap(module.apply)(params, x)`` for stacked :class:`MLP` parameters, computed in
    the feature-major layout (:class:`Stacked`, :func:`mlp_columns`): x (L, ..., D) ->
    (L, ..., outputs + free_outputs)."""
    lead = x.shape[:-1]
    out = mlp_columns(module, params, jnp.swapaxes(x.reshape(lead[0], -1, x.shape[-1]), 1, 2))
    return jnp.swapaxes(out, 1, 2).reshape(lead + (out.shape[1],))


@dataclasses.dataclass(frozen=True)
class NetworkConfig(RunConfig):
    """The ``Config`` fields of every neural learner's Gaussian head (box action spaces only;
    static), declared once beside :class:`RunConfig`'s.

    Attributes:
        log_std: the Gaussian actor's log-std is a learned per-stage vector independent of the
            input ("state_independent") or a second output of the actor network
            ("state_dependent").
        initial_log_std: log(sigma / half range) of the initial policy, a float in [-5, 1]
            (default log 0.5: sigma is half the box's half range).
    """

    log_std: str = static("state_independent", choices=LOG_STD_FORMS)
    initial_log_std: float = static(math.log(0.5), types=(float,), description="a float in [-5, 1]")
