"""Neural networks of the deep learners (flax.linen), and per-stage stacks of them.

* :class:`MLP`: fully connected, ``depth`` hidden layers of ``width`` units, configurable
  activation, a linear output layer. The paper's NN-Constrained networks are
  ``MLP(width=10, depth=2, activation="tanh")`` on the 2-d coordinates ("Env 1").
* :class:`Stacked`: ONE module whose parameters carry a leading stage axis L (L = H for the
  actors, H + 1 for the critics): ``init`` and ``apply`` are ``jax.vmap`` over that axis, so
  stage h's parameters are applied to the batch of inputs seen at stage h, and all stages run
  as one batched computation (no Python list of H networks).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

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
    policy (``fhc_jax.algos.distributions``); the output is then (..., outputs + free_outputs).
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
class Stacked:
    """L independent copies of ``module`` as one stacked parameter pytree (leading axis L).

    ``init(key, x)``: x (D,) or (B, D) a sample input; returns params whose every leaf has a
    leading axis L (each stage initialised from its own key). ``apply(params, x)``: x (L, B, D)
    (stage l's inputs) -> (L, B, outputs), one vmapped call.
    """

    module: nn.Module
    num_stages: int

    def init(self, key: Array, x: Array) -> Any:
        keys = jax.random.split(key, self.num_stages)
        return jax.vmap(lambda k: self.module.init(k, x))(keys)

    def apply(self, params: Any, x: Array) -> Array:
        return jax.vmap(self.module.apply)(params, x)
