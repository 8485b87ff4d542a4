"""e-COP's setup: the constants derived from the environment once, host-side, before anything
compiles (:class:`Setup`): the stacked actor and critic families, the network inputs (a
standardised table of every (stage, state) on the tabular path, the fixed standardisation of
the recorded observations on the sampled path), the rollout model, the thresholds and the
critics' value scales. The learner itself is :mod:`fhc_jax.algos.ecop`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from fhc_jax.algos.core.distributions import ActionHead, Categorical, config_head
from fhc_jax.algos.core.networks import NetworkSpec, SharedAcrossStages, Stacked
from fhc_jax.algos.core.paths import judged_exactly, resolve_observation, takes_sampled_path
from fhc_jax.algos.core.sampled_inputs import critic_value_scale, observation_sample
from fhc_jax.algos.core.tabular_rollout import TabularModel, observation_table, tabular_model

Array = jax.Array

#: the inputs ``Config.observation`` can name ("env": the environment's own observation)
OBSERVATIONS = ("xy", "xyt", "one_hot", "env")


@dataclasses.dataclass(frozen=True)
class Setup:
    """Constants derived from the environment (host-side, built once by :func:`setup`).

    Attributes:
        actor, critic: the stacked network families. obs_table: inputs of every (h, s),
            (H+1, S, D) (None on environments without tabular states).
        horizon, num_states, num_actions: H, S (0 without tabular states), A (0 for box actions).
        model: the rollout model (tabular path). thresholds: d, (M,). value_scale: critic
            output scale (1+M,).
        head: the actor's action head (``Categorical(A)``, or a ``DiagonalGaussian`` on box
            action spaces).
        sampled: the sampled path (:attr:`Config.path`); then ``env``, ``params`` (the rollout
            through ``fhc_jax.rollout``) and ``shift``, ``scale`` (the input standardisation
            x -> (x - shift) / scale of the recorded observations, (D,)) are set.
        observation: the resolved ``Config.observation`` (the train state records it).
    """

    actor: Stacked | SharedAcrossStages
    critic: Stacked | SharedAcrossStages
    obs_table: Array | None
    horizon: int
    num_states: int
    num_actions: int
    model: TabularModel | None = None
    thresholds: Array | None = None
    value_scale: Array | None = None
    head: ActionHead | None = None
    sampled: bool = False
    observation: str = "env"
    env: Any = None
    params: Any = None
    shift: Array | None = None
    scale: Array | None = None

    def normalize(self, x: Array) -> Array:
        """Standardised network input of raw observations x (..., D) (sampled path)."""
        return (jnp.asarray(x, jnp.float32) - self.shift) / self.scale


def actor_critic_networks(
    horizon: int,
    head: ActionHead | int,
    num_constraints: int,
    spec: NetworkSpec,
    output_scale: Any = 0.1,
    feature_major: bool = False,
) -> tuple[Stacked, Stacked]:
    """(actor, critic) stacked families of the ``spec``'s architecture; the actor has ``head``'s
    outputs (an int A: ``Categorical(A)``); ``feature_major``: the layout for the sampled path's
    per-sample batches (:class:`~fhc_jax.algos.core.networks.Stacked`)."""
    head = Categorical(head) if isinstance(head, int) else head
    outputs, free = head.network_outputs
    if spec.shared_stages:  # one network for every stage, on (observation, h / H)
        return (
            SharedAcrossStages(spec.mlp(outputs, free_outputs=free, output_scale=output_scale), horizon, horizon),
            SharedAcrossStages(spec.mlp(1 + num_constraints), horizon, horizon),
        )
    return (
        Stacked(spec.mlp(outputs, free_outputs=free, output_scale=output_scale), horizon, feature_major),
        Stacked(spec.mlp(1 + num_constraints), horizon, feature_major),
    )


def _inputs(env, params, observation: str, normalize: bool) -> Array:
    if observation != "env" and observation not in env.supported_observations:
        valid = ", ".join(repr(o) for o in (*env.supported_observations, "env") if o in OBSERVATIONS)
        raise ValueError(f"ecop: Config.observation must be one of {valid} for {env.name}, found {observation!r}")
    table = observation_table(env, params, None if observation == "env" else observation)
    if not normalize:
        return table
    flat = table.reshape(-1, table.shape[-1])
    std = jnp.std(flat, axis=0)
    return (table - jnp.mean(flat, axis=0)) / jnp.where(std > 0, std, 1.0)


def _is_sampled(env, path: str, observation: str) -> bool:
    """Whether ``Config.path`` takes the sampled path on ``env`` (validated before compiling)."""
    sampled = takes_sampled_path("ecop", env, path)
    if sampled and observation != "env":
        raise ValueError(
            f"ecop: Config.observation must be 'env' for {env.name} on the sampled path (the "
            f"environment's own observation), found {observation!r}"
        )
    if sampled and len(env.observation_shape) != 1:
        raise ValueError(
            f"ecop: the networks take flat observations, but {env.name}'s have shape "
            f"{tuple(env.observation_shape)}; flatten them in the environment"
        )
    return sampled


def _sampled_setup(env, params, spec: NetworkSpec, full: bool) -> Setup:
    """The sampled path's setup (``full=False``: only what :func:`observation_outputs` needs).
    Inputs are standardised over the tabulated observations of a tabular environment, else over
    the observations of 64 episodes of the uniform policy."""
    head = config_head(env, spec)
    table = observation_table(env, params, None) if env.is_tabular else None
    flat = table.reshape(-1, table.shape[-1]) if table is not None else observation_sample(env, params)
    d = flat.shape[-1]
    if spec.normalize_inputs:
        std = jnp.std(flat, axis=0)
        shift, scale = jnp.mean(flat, axis=0), jnp.where(std > 0, std, 1.0)
    else:
        shift, scale = jnp.zeros((d,), jnp.float32), jnp.ones((d,), jnp.float32)
    actor, critic = actor_critic_networks(env.horizon, head, env.num_constraints, spec, feature_major=True)
    kw = {}
    if full:
        kw = dict(
            thresholds=jnp.asarray(env.thresholds(params), jnp.float32),
            value_scale=jnp.asarray(critic_value_scale(env, params)),
        )
    return Setup(
        actor=actor,
        critic=critic,
        obs_table=None if table is None else (table - shift) / scale,
        horizon=env.horizon,
        num_states=env.num_states if env.is_tabular else 0,
        num_actions=0 if env.has_box_actions else env.num_actions,
        head=head,
        sampled=True,
        env=env,
        params=params,
        shift=jnp.asarray(shift, jnp.float32),
        scale=jnp.asarray(scale, jnp.float32),
        **kw,
    )


def setup(env, params, config: Any) -> Setup:
    """Networks, inputs, rollout model, thresholds and critic scales of ``env``.

    Raises:
        ValueError: an observation the environment does not support, ``path="tabular"``
            without a tabular exact model, or non-flat observations on the sampled path.
    """
    spec = NetworkSpec.of(config, observation=resolve_observation(env, config.path, config.observation, "one_hot"))
    if _is_sampled(env, config.path, spec.observation):
        return _sampled_setup(env, params, spec, full=True)
    obs = _inputs(env, params, spec.observation, spec.normalize_inputs)
    head = config_head(env, spec)  # Categorical(A): box environments have no tabular path
    actor, critic = actor_critic_networks(env.horizon, head, env.num_constraints, spec)
    model = tabular_model(env, params)
    return Setup(
        actor=actor,
        critic=critic,
        obs_table=obs,
        horizon=env.horizon,
        num_states=env.num_states,
        num_actions=env.num_actions,
        model=model,
        thresholds=jnp.asarray(env.thresholds(params), jnp.float32),
        value_scale=jnp.asarray(critic_value_scale(env, params)),
        head=head,
        observation=spec.observation,
    )


def policy_setup(env, params, train_state: Any) -> Setup:
    """What :func:`table_logits` (tabular exact models) or :func:`observation_outputs` (any other
    environment) needs, from the input and architecture recorded in the train state (its
    :class:`~fhc_jax.algos.core.networks.NetworkSpec`)."""
    spec = train_state.network
    if not judged_exactly(env):
        return _sampled_setup(env, params, spec, full=False)
    obs = _inputs(env, params, spec.observation, spec.normalize_inputs)
    head = config_head(env, spec)
    actor, critic = actor_critic_networks(env.horizon, head, env.num_constraints, spec)
    return Setup(
        actor=actor,
        critic=critic,
        obs_table=obs,
        horizon=env.horizon,
        num_states=env.num_states,
        num_actions=env.num_actions,
        head=head,
    )
