"""PPO-Lagrangian's networks (actor, reward and cost critics), their optimizers and their
inputs: :class:`Setup` applies them to rows of tabulated inputs on the tabular path and to
recorded observations on the sampled path (:mod:`fhc_jax.algos.core.sampled_inputs`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fhc_jax.algos.core.distributions import ActionHead, Categorical, config_head
from fhc_jax.algos.core.networks import MLP, NetworkSpec
from fhc_jax.algos.core.paths import ENV_OBSERVATIONS
from fhc_jax.algos.core.sampled_inputs import critic_value_scale, input_table, stage_inputs
from fhc_jax.algos.core.tabular_rollout import TabularModel

Array = jax.Array

OBSERVATIONS = ("xy", "xyt", "one_hot", *ENV_OBSERVATIONS)


def _modules(head: ActionHead | int, num_constraints: int, spec: NetworkSpec) -> dict[str, MLP]:
    """The actor (outputs ``head.network_outputs``: A logits, or a Gaussian's mean with its
    log-std as a free per-network vector or as outputs) and the reward and cost critics, of the
    ``spec``'s architecture; ``head`` an int A means ``Categorical(A)``."""
    head = Categorical(head) if isinstance(head, int) else head
    computed, free = head.network_outputs
    return {
        # near-uniform initial policy (Gaussian: mean at the box's centre, sigma from initial_log_std)
        "actor": spec.mlp(computed, free_outputs=free, output_scale=0.01),
        "reward_critic": spec.mlp(1),
        "cost_critic": spec.mlp(num_constraints),
    }


def _optimizer(cfg: Any, lr_scale: Array = 1.0) -> optax.GradientTransformation:
    """clip_by_global_norm + adam per network; learning rates times ``lr_scale``."""

    def chain(lr):
        return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(lr * lr_scale))

    return optax.multi_transform(
        {"actor": chain(cfg.actor_lr), "critic": chain(cfg.critic_lr), "cost": chain(cfg.critic_lr)},
        {"actor": "actor", "reward_critic": "critic", "cost_critic": "cost"},
    )


@dataclasses.dataclass(frozen=True)
class Setup:
    """Constants derived from the environment (host-side, built once by :func:`setup`).

    Attributes:
        modules: the ``{"actor", "reward_critic", "cost_critic"}`` MLPs.
        rows: the U distinct actor inputs, (U, D); per_stage: whether they depend on h.
        critic_rows, critic_per_stage: the same for the critics (``critic_time``).
        horizon, num_states: H, S. num_actions: the actor's outputs per input (A logits;
            the head's ``num_outputs`` on box action spaces, which have no tabular path).
        form, critic_form: the resolved update forms of the actor and of the critics.
        model: the rollout model. thresholds: alpha, (M,). value_scale: B per signal, (1+M,).
        sampled: the sampled path (rows and critic_rows only for :func:`table_logits`, None without
            tabular states); env, params: what it rolls out; observation: "env" or "env_t";
            critic_stage: the critics' inputs get h / H appended; dims: (actor, critic) input
            sizes.
        head: the action distribution of the actor's outputs (``fhc_jax.algos.core.distributions``:
            ``Categorical(A)``, or a ``DiagonalGaussian`` on box action spaces); None means
            ``Categorical(num_actions)``.
    """

    modules: dict[str, MLP]
    rows: Array
    per_stage: bool
    critic_rows: Array
    critic_per_stage: bool
    horizon: int
    num_states: int
    num_actions: int
    form: str
    critic_form: str
    model: TabularModel | None = None
    thresholds: Array | None = None
    value_scale: Array | None = None
    sampled: bool = False
    env: Any = None
    params: Any = None
    observation: str = "env"
    critic_stage: bool = False
    dims: tuple[int, int] = (0, 0)
    head: ActionHead | None = None

    @property
    def action_head(self) -> ActionHead:
        """:attr:`head`, or ``Categorical(num_actions)`` where it is None."""
        return Categorical(self.num_actions) if self.head is None else self.head

    def sample_inputs(self, observations: Array) -> tuple[Array, Array]:
        """(actor, critic) inputs of recorded observations (L, K, D) of stages 0..L-1."""
        x = observations.astype(jnp.float32)
        xt = stage_inputs(x, self.horizon) if self.observation == "env_t" or self.critic_stage else x
        return (xt if self.observation == "env_t" else x), xt

    def row_index(self, hs: Array, states: Array, critic: bool = False) -> Array:
        per_stage = self.critic_per_stage if critic else self.per_stage
        return hs * self.num_states + states if per_stage else states

    def logits_table(self, actor_params: Any) -> Array:
        """f_theta(x_h(s)) for all h < H and s, (H, S, A)."""
        out = self.modules["actor"].apply(actor_params, self.rows)
        if self.per_stage:
            return out.reshape(self.horizon, self.num_states, self.num_actions)
        return jnp.broadcast_to(out, (self.horizon,) + out.shape)

    def apply(self, name: str, params: Any, rows: Array, table: bool) -> Array:
        """Network ``name`` at the inputs with row indices ``rows`` (...,) -> (..., outputs)
        (row indices into ``self.rows`` for the actor, ``self.critic_rows`` for the critics;
        on the sampled path ``rows`` are the inputs themselves, (..., D))."""
        mod = self.modules[name]
        if self.sampled:
            return mod.apply(params, rows)
        inputs = self.rows if name == "actor" else self.critic_rows
        if table:
            return mod.apply(params, inputs)[rows]
        return mod.apply(params, inputs[rows])


def _actor_rows(env, params, observation: str) -> tuple[np.ndarray, np.ndarray, bool]:
    """(observation table (H, S, D), distinct actor rows (U, D), whether they depend on h)."""
    if observation not in env.supported_observations and observation not in ENV_OBSERVATIONS:
        valid = ", ".join(repr(o) for o in (*env.supported_observations, *ENV_OBSERVATIONS) if o in OBSERVATIONS)
        raise ValueError(
            f"ppo_lagrangian: Config.observation must be one of {valid} for {env.name}, found {observation!r}"
        )
    h, s = env.horizon, env.num_states
    table = np.asarray(input_table(env, params, observation))[:h]  # (H, S, D)
    per_stage = not np.array_equal(table, np.broadcast_to(table[:1], table.shape))
    return table, table.reshape(h * s, -1) if per_stage else table[0].reshape(s, -1), per_stage


def sampled_setup(env, params, spec: NetworkSpec, config: Any | None) -> Setup:
    """PPO-Lagrangian's sampled-path setup of the networks ``spec`` (``config``, its Config;
    None: only what its ``observation_outputs`` and ``table_logits`` need); input rows only where there are
    tabular states (for :func:`table_logits`)."""
    rows = per_stage = None
    if env.is_tabular:
        _, rows, per_stage = _actor_rows(env, params, spec.observation)
        rows = jnp.asarray(rows, jnp.float32)
    d = env.observation_shape[0] + (spec.observation == "env_t")
    critic_stage = config is not None and config.critic_time and spec.observation == "env"
    kw = (
        {}
        if config is None
        else dict(
            thresholds=jnp.asarray(env.thresholds(params), jnp.float32),
            value_scale=jnp.asarray(critic_value_scale(env, params)),
        )
    )
    head = config_head(env, spec)
    return Setup(
        _modules(head, env.num_constraints, spec),
        rows,
        per_stage,
        rows,
        per_stage,
        env.horizon,
        env.num_states if env.is_tabular else 0,
        head.num_outputs,
        form="samples",
        critic_form="samples",
        sampled=True,
        env=env,
        params=params,
        observation=spec.observation,
        critic_stage=critic_stage,
        dims=(d, d + critic_stage),
        head=head,
        **kw,
    )
