"""How Saute-Lagrangian (:mod:`fhc_jax.algos.saute`) sets itself up on an environment: which
representation of the remaining budget it takes (exact cost counts on the augmented tabular
model, or a continuous budget on the sampled path), the augmented environment it trains on
(:mod:`fhc_jax.envs.saute`) and PPO-Lagrangian's setup over its inputs. Host-side, once per
training run; ``config`` is a :class:`fhc_jax.algos.saute.Config`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fhc_jax.algos import ppo_lagrangian as ppo
from fhc_jax.algos.core.networks import NetworkSpec
from fhc_jax.algos.core.paths import ENV_OBSERVATIONS, judged_exactly
from fhc_jax.algos.core.sampled_inputs import input_table
from fhc_jax.algos.core.tabular_rollout import TabularModel, tabular_model, value_scale
from fhc_jax.envs.base import Environment
from fhc_jax.envs.saute import (
    STAGE_OBSERVATION,
    BudgetEnv,
    SauteEnv,
    _multiples,
    _transition_costs,
    budget_levels,
    count_kernel,
    detect_cost_unit,
)
from fhc_jax.envs.wrappers import ScaledSignals

Array = jax.Array

#: the network inputs of the base state (z is appended): encoders ("xy", "xyt", "one_hot") or
#: the environment's own observation ("env"; "env_t": with h / H appended; "env_stage": with the
#: stage one-hot e_h (H + 1 entries) and h / H)
OBSERVATIONS = (*ppo.OBSERVATIONS, STAGE_OBSERVATION)

#: the observations that read the environment's own observation (not an encoder of its states)
OWN_OBSERVATIONS = (*ENV_OBSERVATIONS, STAGE_OBSERVATION)

#: the count representation only while the augmented policy table has at most this many
#: entries (H S B A; B budget levels); "auto" takes the continuous budget above it
MAX_COUNT_ENTRIES = 1 << 24


def unscaled(env: Environment) -> Environment:
    """``env`` without a :class:`~fhc_jax.envs.wrappers.ScaledSignals` around it."""
    return env.env if isinstance(env, ScaledSignals) else env


def budget_env(env: Environment) -> BudgetEnv | None:
    """The :class:`BudgetEnv` that ``env`` is (inside a ScaledSignals or not), or None."""
    inner = unscaled(env)
    return inner if isinstance(inner, BudgetEnv) else None


@dataclasses.dataclass(frozen=True)
class Setup:
    """The PPO-Lagrangian setup (``ppo``) and the budget's representation.

    Attributes:
        ppo: PPO-Lagrangian's setup over the augmented inputs (tabular rows over (s, c) for
            "count"; the sampled path over :class:`BudgetEnv` for "continuous").
        env: the augmented environment, :class:`SauteEnv` ("count") or :class:`BudgetEnv`.
        budget: "count" or "continuous".
        kernel, initial: "count": the compact kernel of the exact marginalisation
            (next_states, probabilities, increments) and the augmented initial distribution.
        base_inputs: "continuous" on tabular states: x_h(s) of every stage and state, (H, S, D)
            (the reported policy at states the estimate did not visit), else None.
        table_episodes: "continuous" on tabular states: episodes of the estimated Markov policy.
        budget_units: "count": q = alpha / unit, the budget in cost units.
    """

    ppo: ppo.Setup
    env: Environment
    budget: str
    budget_units: float = 0.0
    kernel: tuple | None = None
    initial: Array | None = None
    base_inputs: Array | None = None
    table_episodes: int = 0


def resolve_base_observation(env: Environment, observation: str) -> str:
    """``Config.observation = "auto"``: on a tabular environment the base state with its stage,
    "xyt" where the environment supports it (a spatial one), else "env_stage" (its own
    observation with the stage one-hot and h / H); "env" elsewhere (whose observation carries
    the stage if the task needs it); any other value unchanged. The finite-horizon optimum is
    non-stationary: the augmented state (s, z) alone leaves the network one action law for
    every stage, and a stage read only as h / H leaves neighbouring stages nearly one law where
    the optimum switches between them (a tight budget spent at the right stages)."""
    if observation != "auto":
        return observation
    if not env.is_tabular:
        return "env"
    return "xyt" if "xyt" in env.supported_observations else STAGE_OBSERVATION


def check_observation(env: Environment, observation: str) -> None:
    """Whether ``observation`` can be the input of ``env``'s base state (ValueError if not)."""
    valid = [o for o in (*env.supported_observations, *OWN_OBSERVATIONS) if o in OBSERVATIONS]
    if observation not in valid:
        raise ValueError(
            f"saute: Config.observation must be one of {', '.join(map(repr, valid))} or 'auto' for "
            f"{env.name}, found {observation!r}"
        )
    if observation in OWN_OBSERVATIONS and len(env.observation_shape) != 1:
        raise ValueError(
            f"saute: Config.observation = {observation!r}: the networks take flat observations, but "
            f"{env.name}'s have shape {tuple(env.observation_shape)}; flatten them in the environment"
        )


def budget_thresholds(env: Environment, params: Any) -> np.ndarray:
    alpha = np.asarray(env.thresholds(params), np.float64).reshape(-1)
    if not np.all(alpha > 0):
        raise ValueError(
            f"saute: the remaining budget z = (alpha - cost so far) / alpha needs thresholds alpha > 0, "
            f"found {alpha.tolist()} for {env.name}"
        )
    return alpha


def resolve_budget(env: Environment, params: Any, config: Any) -> tuple[str, float]:
    """The representation of the budget on ``env`` (host-side): ("count", q) with q = alpha /
    unit (the budget in cost units, unit-free), or ("continuous", 0.0) (module docstring).
    ``env`` may be the learner's scaled copy (:class:`~fhc_jax.envs.wrappers.ScaledSignals`):
    the unit is found, or ``cost_unit`` read, in the environment's own units.

    Raises:
        ValueError: "count" asked for (``budget``, ``path="tabular"`` or ``cost_unit``) where
            it does not apply, with the reason; ``budget="count"`` with ``path="sampled"``.
    """
    want = config.budget
    if config.path == "sampled":
        if want == "count":
            raise ValueError("saute: Config.budget = 'count' needs the tabular path, but Config.path = 'sampled'")
        want = "continuous"
    if want == "continuous":
        if config.path == "tabular":
            raise ValueError(
                "saute: Config.path = 'tabular' needs cost counts, but Config.budget = 'continuous' "
                "(the continuous budget takes the sampled path)"
            )
        return "continuous", 0.0
    asked = want == "count" or config.path == "tabular" or config.cost_unit > 0
    base = unscaled(env)
    reason, q = None, 0.0
    if not judged_exactly(base):
        reason = f"{base.name} declares no tabular exact model"
    elif base.num_constraints != 1:
        reason = f"cost counts track one constraint, {base.name} has {base.num_constraints}"
    else:
        alpha = float(budget_thresholds(base, params)[0])
        unit = config.cost_unit if config.cost_unit > 0 else detect_cost_unit(base, params)
        if unit is None:
            reason = (
                f"the stage costs of {base.name} are not non-negative integer multiples of one unit "
                "(declare Config.cost_unit if they are)"
            )
        elif config.cost_unit > 0 and not _multiples(_transition_costs(base, params)[2], unit):
            reason = (
                f"the stage costs of {base.name} are not non-negative integer multiples of Config.cost_unit = {unit:g}"
            )
        else:
            levels = budget_levels(alpha, unit)
            entries = base.horizon * base.num_states * levels * base.num_actions
            if entries > MAX_COUNT_ENTRIES:
                reason = (
                    f"{levels} budget levels (alpha / unit = {alpha / unit:.4g}) make an augmented table of "
                    f"{entries} entries, more than {MAX_COUNT_ENTRIES}"
                )
            else:
                q = alpha / unit
    if reason is None:
        return "count", q
    if asked:
        what = (
            "Config.budget = 'count'"
            if want == "count"
            else ("Config.path = 'tabular'" if config.path == "tabular" else f"Config.cost_unit = {config.cost_unit:g}")
        )
        raise ValueError(
            f"saute: {what} asks for exact cost counts, but {reason}; use Config.budget = 'continuous' (or 'auto')"
        )
    return "continuous", 0.0


def count_setup(env: Environment, params: Any, spec: NetworkSpec, units: float, config: Any) -> Setup:
    """The count representation's setup: PPO's tabular path of the networks ``spec`` (its
    ``observation`` Saute's) over the augmented states (s, c), rows = (x_h(s), z(c)), and the
    marginalisation kernel (host-side)."""
    alpha = float(budget_thresholds(env, params)[0])
    senv = SauteEnv(env, alpha, cost_unit=alpha / units)
    h, s, b = senv.horizon, env.num_states, senv.levels
    base_obs, net_obs = network_observation(spec.observation)
    base = base_table(env, params, base_obs)[:h]  # (H, S, D)
    z = np.asarray(senv.budget(np.arange(b)), np.float32)
    parts = [
        np.broadcast_to(base[:, :, None], (h, s, b, base.shape[-1])),
        np.broadcast_to(z[None, None, :, None], (h, s, b, 1)),
    ]
    if net_obs == "env_t":  # (x, z, h / H): the input of the same network played in BudgetEnv
        parts.append(np.broadcast_to((np.arange(h, dtype=np.float32) / h)[:, None, None, None], (h, s, b, 1)))
    table = np.concatenate(parts, axis=-1).reshape(h, s * b, -1)
    per_stage = not np.array_equal(table, np.broadcast_to(table[:1], table.shape))
    rows = table.reshape(h * s * b, -1) if per_stage else table[0]
    critic_rows, critic_per_stage = rows, per_stage
    if config is not None and config.critic_time and not per_stage:
        t = np.broadcast_to((np.arange(h, dtype=np.float32) / h)[:, None, None], (h, s * b, 1))
        critic_rows, critic_per_stage = np.concatenate([table, t], axis=-1).reshape(h * s * b, -1), True
    kernel, beta = count_kernel(senv, params)
    if config is not None:
        n = h * config.episodes_per_iteration
        if config.num_minibatches > n:
            raise ValueError(f"saute: Config.num_minibatches must be <= H K = {n}, found {config.num_minibatches}")
        pick = lambda u: (
            config.update_form
            if config.update_form != "auto"
            else ("table" if config.num_minibatches * u <= n else "samples")
        )
        base_model = tabular_model(env, params)
        kw = {
            "form": pick(rows.shape[0]),
            "critic_form": pick(critic_rows.shape[0]),
            "model": rollout_model(senv, params, base_model, beta),
            "thresholds": jnp.asarray(env.thresholds(params), jnp.float32).reshape(-1),
            "value_scale": jnp.asarray(value_scale(base_model)),
        }
    else:
        kw = {"form": "table", "critic_form": "table"}
    setup_ppo = ppo.Setup(
        modules=ppo._modules(env.num_actions, 1, spec),
        rows=jnp.asarray(rows, jnp.float32),
        per_stage=per_stage,
        critic_rows=jnp.asarray(critic_rows, jnp.float32),
        critic_per_stage=critic_per_stage,
        horizon=h,
        num_states=s * b,
        num_actions=env.num_actions,
        observation=spec.observation,
        **kw,
    )
    return Setup(
        ppo=setup_ppo,
        env=senv,
        budget="count",
        budget_units=units,
        kernel=kernel,
        initial=jnp.asarray(beta, jnp.float32),
    )


def network_observation(observation: str) -> tuple[str, str]:
    """(the base observation of :class:`BudgetEnv`, PPO's input over it) of a Saute observation:
    "env_t" appends the stage after z; "env_stage" puts the stage one-hot in the base
    observation and h / H after z; encoders encode the base state."""
    if observation == STAGE_OBSERVATION:
        return STAGE_OBSERVATION, "env_t"
    if observation in ENV_OBSERVATIONS:
        return "env", observation
    return observation, "env"


def base_table(env: Environment, params: Any, base_obs: str) -> np.ndarray:
    """The base observation of every (stage, state) of a tabular environment, (H+1, S, D)
    float32 (host-side): an encoder's, the environment's own ("env"), or that followed by the
    stage one-hot ("env_stage", D = D_env + H + 1). Computed at once even while a caller's
    ``jit`` traces (e.g. :func:`policy_setup` inside the program that plays the policy), as long
    as ``params`` are concrete."""
    name = "env" if base_obs == STAGE_OBSERVATION else base_obs
    with jax.ensure_compile_time_eval():
        table = np.asarray(input_table(env, params, name), np.float32)
    table = table.reshape(env.horizon + 1, env.num_states, -1)
    if base_obs != STAGE_OBSERVATION:
        return table
    e = np.eye(env.horizon + 1, dtype=np.float32)  # e_h of stage h, (H+1, H+1): BudgetEnv's stage_one_hot
    return np.concatenate([table, np.broadcast_to(e[:, None], (*table.shape[:2], e.shape[-1]))], axis=-1)


def continuous_setup(env: Environment, params: Any, spec: NetworkSpec, table_episodes: int, config: Any) -> Setup:
    """The continuous representation's setup: PPO's sampled path of the networks ``spec`` (its
    ``observation`` Saute's) over :class:`BudgetEnv`
    (``env`` itself when it already is one), and on tabular states the base inputs of the
    estimated Markov policy (host-side)."""
    base_obs, net_obs = network_observation(spec.observation)
    benv = budget_env(env)
    if benv is None:  # a tabular environment: the budget is tracked here
        benv = train_env = BudgetEnv(env, budget_thresholds(env, params), base_obs)
    elif benv.base_observation != base_obs:
        raise ValueError(
            f"saute: the policy reads the base observation {base_obs!r} (Config.observation = "
            f"{spec.observation!r}), but this BudgetEnv gives {benv.base_observation!r}; build it as "
            f"fhc_jax.envs.saute.BudgetEnv(env, observation={base_obs!r})"
        )
    else:  # the environment the learner was handed already tracks it (in its ScaledSignals or not)
        train_env = env
    if config is not None and config.num_minibatches > env.horizon * config.episodes_per_iteration:
        raise ValueError(
            f"saute: Config.num_minibatches must be <= H K = {env.horizon * config.episodes_per_iteration}, "
            f"found {config.num_minibatches}"
        )
    setup_ppo = ppo._sampled_setup(train_env, params, spec.replace(observation=net_obs), config)
    base_inputs = None
    base = benv.env
    if base.is_tabular:
        base_inputs = jnp.asarray(base_table(base, params, base_obs)[: base.horizon])
    return Setup(
        ppo=setup_ppo, env=train_env, budget="continuous", base_inputs=base_inputs, table_episodes=table_episodes
    )


def rollout_model(senv: SauteEnv, params, base: TabularModel, beta: np.ndarray) -> TabularModel:
    """The augmented env's rollout model: environments with one-uniform noise are stepped
    through :meth:`SauteEnv.transition` (no augmented kernel is built); others get the full
    augmented successor table (fine for small CMDPs)."""
    if not senv.has_uniform_noise:
        return tabular_model(senv, params)
    b = senv.levels
    rep = lambda x, axis: jnp.repeat(jnp.asarray(x), b, axis=axis)
    dummy = jnp.zeros((1, 1, 1))
    return TabularModel(
        next_states=dummy.astype(jnp.int32),
        cdf=dummy,
        last=dummy[0].astype(jnp.int32),
        rewards=jnp.zeros((senv.horizon, 1)),
        costs=jnp.zeros((1, senv.horizon, 1)),
        terminal_rewards=rep(base.terminal_rewards, 0),
        terminal_costs=rep(base.terminal_costs, 1),
        initial_cdf=jnp.asarray(np.cumsum(beta), jnp.float32),
        signal="arrival",
        time_varying=False,
        step_env=senv,
        step_params=params,
    )


def setup(env, params, config: Any) -> Setup:
    """The budget's representation (:func:`resolve_budget`), the augmented inputs, rollout
    model and (counts) marginalisation kernel (host-side).

    Raises:
        ValueError: box actions on an environment with tabular states (its reported Markov
            policy needs finitely many actions), an unsupported observation, thresholds that
            are not > 0, counts asked for where they do not apply (the reason), too many
            minibatches.
    """
    check_box_actions(env)
    handed = budget_env(env)  # a BudgetEnv the learner was handed (no tabular exact model), or None
    observation = resolve_base_observation(unscaled(env) if handed is None else handed.env, config.observation)
    config = config.replace(observation=observation)
    if handed is not None:
        if config.budget == "count" or config.path == "tabular" or config.cost_unit > 0:
            raise ValueError(
                f"saute: {env.name} has no tabular exact model: its budget is continuous; leave "
                "Config.budget, path and cost_unit at their defaults"
            )
        return continuous_setup(env, params, NetworkSpec.of(config), config.eval_episodes, config)
    check_observation(env, observation)
    budget_thresholds(env, params)
    budget, units = resolve_budget(env, params, config)
    if budget == "count":
        return count_setup(env, params, NetworkSpec.of(config), units, config)
    return continuous_setup(env, params, NetworkSpec.of(config), config.eval_episodes, config)


def check_box_actions(env: Environment) -> None:
    """ValueError (:func:`box_actions_refusal`) for box actions on tabular states."""
    if env.has_box_actions and unscaled(env).is_tabular:
        raise ValueError(box_actions_refusal(env))


def box_actions_refusal(env) -> str:
    """Why Saute-Lagrangian refuses ``env``, with tabular states and box actions (the message
    of its ValueError)."""
    return (
        f"saute: on an environment with tabular states Saute-Lagrangian reports a Markov policy table, which "
        f"needs finitely many actions, but {env.name} has continuous (box) actions; give it discrete actions, "
        f"or drop its tabular states (then the budget-tracking Gaussian policy is judged by Monte-Carlo in "
        f"fhc_jax.envs.saute.BudgetEnv)"
    )


def policy_setup(env, params, train_state) -> Setup:
    """What :func:`table_logits` and :func:`observation_outputs` need, rebuilt from the train state
    (budget representation, input and architecture) and ``params`` (the threshold fixes the
    budget levels)."""
    if train_state.budget == "count" and budget_env(env) is None:
        return count_setup(env, params, train_state.network, train_state.budget_units, None)
    return continuous_setup(env, params, train_state.network, train_state.table_episodes, None)
