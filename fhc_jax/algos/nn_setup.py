"""NN-Constrained's setup: the constants derived from the environment once, host-side, before
anything compiles (:class:`Setup`): the stacked networks, the fixed input standardisation, the
rollout model, the thresholds, and on the sampled path the critics' value scales and the cost
bound the budget tightens from. The learner itself is :mod:`fhc_jax.algos.nn_constrained`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from fhc_jax.algos.core import multipliers
from fhc_jax.algos.core.distributions import ActionHead, config_head
from fhc_jax.algos.core.hyperparameters import resolve_env_defaults
from fhc_jax.algos.core.networks import NetworkSpec
from fhc_jax.algos.core.paths import judged_exactly, takes_sampled_path
from fhc_jax.algos.core.sampled_inputs import critic_value_scale, observation_sample
from fhc_jax.algos.core.tabular_rollout import TabularModel, observation_table, tabular_model
from fhc_jax.algos.nn_losses import Networks

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class Setup:
    """Constants derived from the environment (built once by :func:`setup`).

    Attributes:
        nets: :class:`Networks`.
        shift, scale: the fixed input standardisation x -> (x - shift) / scale, (D,).
        obs_table: standardised network inputs of every (stage, state), (H+1, S, D); None
            without tabular states.
        env, params: the environment (the sampled path rolls out through ``fhc_jax.rollout``).
        model: the tabular rollout model (tabular path). thresholds: alpha, (M,).
        horizon, num_states, num_actions, num_constraints: H, S (0 without tabular states), A
            (0 for box actions), M.
        sampled: the path (NN-Constrained's ``Config.path``). form: the loss form, "table" or
            "samples".
        head: the actor's action head (``Categorical(A)`` or a ``DiagonalGaussian`` on box
            action spaces).
        violation_units: d^(k) of the relative violation (C - alpha) / d the multiplier moves
            with (:func:`~fhc_jax.algos.core.multipliers.violation_units`), (M,).
        value_scale: the critics' output scale per channel [V, W^(1..M)] on the sampled path
            (:func:`~fhc_jax.algos.core.sampled_inputs.critic_value_scale`: the networks predict
            values / scale and the critic loss is measured in those units), (1 + M,); None on
            the tabular path (scale 1).
        cost_bound: the largest episode cost per constraint that the signals allow (the cost
            channels of :func:`~fhc_jax.algos.core.sampled_inputs.critic_value_scale`), where
            the budget tightens from (``Config.budget_tightening``), (M,); None when it is 0.
    """

    nets: Networks
    shift: Array
    scale: Array
    obs_table: Array | None
    env: Any
    params: Any
    model: TabularModel | None
    thresholds: Array | None
    horizon: int
    num_states: int
    num_actions: int
    num_constraints: int
    sampled: bool
    form: str
    head: ActionHead
    violation_units: Array | None = None
    value_scale: Array | None = None
    cost_bound: Array | None = None

    def normalize(self, x: Array) -> Array:
        """Standardised network input of raw observations x (..., D)."""
        return (x - self.shift) / self.scale


def resolve_update_form(config: Any, num_states: int) -> str:
    """The loss form "auto" picks ("table" iff S <= K)."""
    if config.update_form != "auto":
        return config.update_form
    return "table" if num_states <= config.episodes_per_iteration else "samples"


def _input_stats(env, params, observation: str, normalize: bool) -> tuple[Array | None, Array, Array]:
    """(raw observation table (H+1, S, D) or None, shift (D,), scale (D,)) of the networks'
    inputs. With ``normalize`` the inputs are standardised per dimension (a fixed affine map:
    coordinates in [0, 1] become zero-mean, unit-variance, which lets small tanh networks draw
    sharper maps), over every (stage, state) of a tabular environment, else over the states
    that 64 episodes of the uniform policy visit (:func:`fhc_jax.algos.core.sampled_inputs.observation_sample`)."""
    name = None if observation == "env" else observation
    if env.is_tabular:
        table = observation_table(env, params, name)
        flat = table.reshape(-1, table.shape[-1])
    else:
        table, flat = None, observation_sample(env, params)
    if not normalize:
        d = flat.shape[-1]
        return table, jnp.zeros((d,), jnp.float32), jnp.ones((d,), jnp.float32)
    std = jnp.std(flat, axis=0)
    return table, jnp.mean(flat, axis=0), jnp.where(std > 0, std, 1.0)


def _setup(
    env, params, spec: NetworkSpec, path: str, model: TabularModel | None, thresholds: Array | None, form: str
) -> Setup:
    sampled = path == "sampled" or (path == "auto" and not judged_exactly(env))
    if spec.observation != "env" and (sampled or spec.observation not in env.supported_observations):
        valid = ", ".join(map(repr, ("env", *(env.supported_observations if not sampled else ()))))
        raise ValueError(
            f"Config.observation must be one of {valid} for {env.name}"
            f"{' on the sampled path' if sampled else ''}, found {spec.observation!r}"
        )
    if len(env.observation_shape) != 1:
        raise ValueError(
            f"nn_constrained: the networks take flat observations, but {env.name}'s have "
            f"shape {env.observation_shape}; flatten them in the environment"
        )
    head = config_head(env, spec)
    table, shift, scale = _input_stats(env, params, spec.observation, spec.normalize_inputs)
    return Setup(
        nets=Networks.build(env.horizon, head, env.num_constraints, spec, feature_major=sampled),
        shift=shift,
        scale=scale,
        obs_table=None if table is None else (table - shift) / scale,
        env=env,
        params=params,
        model=model,
        thresholds=thresholds,
        horizon=env.horizon,
        num_states=env.num_states if env.is_tabular else 0,
        num_actions=0 if env.has_box_actions else env.num_actions,
        num_constraints=env.num_constraints,
        sampled=sampled,
        form="samples" if sampled else form,
        head=head,
    )


def setup(env, params, config: Any) -> Setup:
    """Networks, input standardisation, rollout model and thresholds of ``env`` (host-side).

    Raises:
        ValueError: an observation the environment does not support, ``path="tabular"`` on an
            environment without a tabular exact model, or non-flat observations.
    """
    config = resolve_env_defaults(config, judged_exactly(env))
    tabular = not takes_sampled_path("nn_constrained", env, config.path) and judged_exactly(env)
    thresholds = jnp.asarray(env.thresholds(params), jnp.float32)
    out = _setup(
        env,
        params,
        NetworkSpec.of(config),
        config.path,
        tabular_model(env, params) if tabular else None,
        thresholds,
        resolve_update_form(config, env.num_states) if tabular else "samples",
    )
    fraction = config.budget_tightening
    tightens = not isinstance(fraction, (int, float)) or fraction > 0
    signal_bounds = jnp.asarray(critic_value_scale(env, params)) if tightens or out.sampled else None
    return dataclasses.replace(
        out,
        violation_units=multipliers.violation_units(thresholds, env.horizon),
        value_scale=signal_bounds if out.sampled and config.variant != "paper" else None,
        cost_bound=signal_bounds[1:] if tightens else None,
    )


def policy_setup(env, params, train_state: Any) -> Setup:
    """What :func:`table_logits` and :func:`observation_outputs` need, from the input and architecture
    recorded in the train state (its :class:`~fhc_jax.algos.core.networks.NetworkSpec`)."""
    return _setup(env, params, train_state.network, "auto", None, None, "table")
