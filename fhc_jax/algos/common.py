"""Pieces shared by the learners: step-size schedules checked against Assumption 3, the
projected multiplier update, hyperparameter pytrees, a fast tabular rollout, and the training
loop with periodic exact evaluation.

Everything here is a pure function over pytrees; nothing keeps global state.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from fhc_jax.cmdp import transitions as tr
from fhc_jax.cmdp.evaluate import evaluate
from fhc_jax.cmdp.model import TabularCMDP
from fhc_jax.cmdp.transitions import SparseTransitions
from fhc_jax.envs.base import Environment
from fhc_jax.envs.encoders import make_encoder
from fhc_jax.rollout import fast_key, uniform_pairs

Array = jax.Array


# ----------------------------------------------------------------------------- hyperparameter pytrees


def _is_concrete(x: Any) -> bool:
    return not isinstance(x, jax.core.Tracer)


def hyperparameters(*, static: Sequence[str] = ()):
    """Class decorator: a frozen dataclass that is a pytree whose non-``static`` fields are
    leaves (numeric hyperparameters: ``vmap`` over them without recompiling) and whose
    ``static`` fields are auxiliary data (shape-setting choices, part of the jit cache key).

    Construction runs ``__post_init__`` (validation); pytree reconstruction inside JAX
    transformations bypasses it (leaves may be tracers there).
    """

    def wrap(cls):
        cls = dataclasses.dataclass(frozen=True)(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = set(static) - set(names)
        if unknown:
            raise TypeError(f"{cls.__name__}: static fields {sorted(unknown)} are not fields")
        leaves = tuple(n for n in names if n not in static)
        statics = tuple(n for n in names if n in static)

        def flatten_with_keys(obj):
            children = tuple((jax.tree_util.GetAttrKey(n), getattr(obj, n)) for n in leaves)
            return children, tuple(getattr(obj, n) for n in statics)

        def unflatten(aux, children):
            obj = object.__new__(cls)
            for n, v in zip(leaves, children):
                object.__setattr__(obj, n, v)
            for n, v in zip(statics, aux):
                object.__setattr__(obj, n, v)
            return obj

        jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten)
        cls._leaf_fields = leaves
        cls._static_fields = statics
        return cls

    return wrap


def stack(configs: Sequence[Any]) -> Any:
    """Stack hyperparameter pytrees (same static fields) along a new leading axis, for
    ``jax.vmap(train, in_axes=(None, 0))(key, stacked)``.

    Raises:
        ValueError: empty sequence, or static fields that differ (they set shapes).
    """
    configs = list(configs)
    if not configs:
        raise ValueError("stack: expected at least one config, found none")
    treedef = jax.tree.structure(configs[0])
    for i, c in enumerate(configs[1:], 1):
        if jax.tree.structure(c) != treedef:
            raise ValueError(
                f"stack: config {i} differs from config 0 in a static field (static fields set "
                "shapes and cannot be vmapped); only numeric hyperparameters may differ"
            )
    return jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x, jnp.float32) for x in xs]), *configs)


# ----------------------------------------------------------------------------- step sizes


@hyperparameters()
class PowerSchedule:
    """Step size x(n) = init / (1 + n / decay) ** power at update n = 0, 1, 2, ...

    Assumption 3 of the paper holds for such schedules exactly when 1/2 < power <= 1
    (sum x(n) = inf, sum x(n)^2 < inf); the ratio of two of them tends to zero exactly when
    the faster one has the strictly smaller power. ``decay`` (> 0, in updates) sets how long
    the schedule stays near ``init``. All three fields are numeric pytree leaves.
    """

    init: float
    power: float = 0.6
    decay: float = 100.0

    def __call__(self, n: Array) -> Array:
        n = jnp.asarray(n, jnp.float32)
        return self.init / (1.0 + n / self.decay) ** self.power


def _real(owner: str, name: str, value: Any) -> np.ndarray | None:
    """Concrete values as a float64 array (None when traced); ValueError if not numeric/finite."""
    if not _is_concrete(value):
        return None
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{owner}.{name} must be a real number, found {value!r}") from None
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{owner}.{name} must be finite, found {value!r}")
    return arr


def _fmt(arr: np.ndarray) -> str:
    return f"{float(arr):g}" if arr.ndim == 0 else str(arr.tolist())


def check_positive(owner: str, name: str, value: Any, *, allow_zero: bool = False) -> None:
    """Raise ``ValueError`` unless ``value`` (scalar or array of vmapped values) is > 0 (>= 0)."""
    arr = _real(owner, name, value)
    if arr is None:
        return
    bad = np.any(arr < 0) if allow_zero else np.any(arr <= 0)
    if bad:
        rel = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{owner}.{name} must be {rel}, found {_fmt(arr)}")


def check_range(owner: str, name: str, value: Any, low: float, high: float) -> None:
    """Raise ``ValueError`` unless low <= value <= high (elementwise)."""
    arr = _real(owner, name, value)
    if arr is None:
        return
    if np.any(arr < low) or np.any(arr > high):
        raise ValueError(f"{owner}.{name} must lie in [{low:g}, {high:g}], found {_fmt(arr)}")


def check_averaging(owner: str, name: str, value: Any) -> None:
    """Raise ``ValueError`` unless 0 <= value < 1 (an averaging weight)."""
    arr = _real(owner, name, value)
    if arr is not None and (np.any(arr < 0) or np.any(arr >= 1)):
        raise ValueError(f"{owner}.{name} must lie in [0, 1), found {_fmt(arr)}")


def check_assumption3(owner: str, schedules: dict[str, PowerSchedule]) -> None:
    """Validate fast-to-slow schedules against the paper's Assumption 3.

    ``schedules`` maps field names to schedules, ordered fastest first, e.g.
    ``{"critic_step": a, "actor_step": b, "multiplier_step": c}``. Requires for each:
    init > 0 and decay > 0 (positive step sizes), 1/2 < power <= 1 (sum diverges, sum of
    squares converges); and for consecutive pairs a strictly larger power for the slower
    schedule (b(n)/a(n) -> 0, c(n)/b(n) -> 0). Works elementwise on vmapped (array) values.

    Raises:
        ValueError: naming the field and the violated condition.
    """
    powers = {}
    for name, sched in schedules.items():
        if not isinstance(sched, PowerSchedule):
            raise ValueError(f"{owner}.{name} must be a PowerSchedule, found {type(sched).__name__}")
        check_positive(owner, f"{name}.init", sched.init)
        check_positive(owner, f"{name}.decay", sched.decay)
        p = _real(owner, f"{name}.power", sched.power)
        if p is not None and (np.any(p <= 0.5) or np.any(p > 1.0)):
            cond = "sum of squared step sizes must converge" if np.any(p <= 0.5) else "sum of step sizes must diverge"
            raise ValueError(
                f"{owner}.{name}.power must lie in (0.5, 1] (Assumption 3: {cond}), found {_fmt(p)}"
            )
        powers[name] = p
    names = list(schedules)
    for fast, slow in zip(names, names[1:]):
        pf, ps = powers[fast], powers[slow]
        if pf is None or ps is None:
            continue
        if np.any(ps <= pf):
            raise ValueError(
                f"{owner}.{slow}.power must be > {owner}.{fast}.power (Assumption 3: "
                f"{slow}(n) / {fast}(n) -> 0), found {_fmt(ps)} <= {_fmt(pf)}"
            )


def check_schedules(owner: str, schedules: dict[str, PowerSchedule], assumption3: bool = True) -> None:
    """Validate the learner's step-size schedules (fastest first): against Assumption 3
    (:func:`check_assumption3`) when ``assumption3``, else only that each is a
    :class:`PowerSchedule` with init > 0, decay > 0 and power >= 0 (e.g. constant step sizes,
    outside the paper's theory)."""
    if assumption3:
        check_assumption3(owner, schedules)
        return
    for name, s in schedules.items():
        if not isinstance(s, PowerSchedule):
            raise ValueError(f"{owner}.{name} must be a PowerSchedule, found {type(s).__name__}")
        check_positive(owner, f"{name}.init", s.init)
        check_positive(owner, f"{name}.decay", s.decay)
        check_positive(owner, f"{name}.power", s.power, allow_zero=True)


# ----------------------------------------------------------------------------- multipliers


def project_multipliers(penalties: Array, bound: Array) -> Array:
    """The paper's (.)^- projection, written for penalties nu = -lambda: clip to [0, bound].

    The paper keeps lambda in [P, 0] (P < 0) via (x)^- = min(0, max(x, P)); with
    nu = -lambda and bound = -P this is nu in [0, bound].
    """
    return jnp.clip(penalties, 0.0, bound)


def multiplier_step(penalties: Array, violation: Array, step: Array, bound: Array) -> Array:
    """Projected dual ascent on the penalties (paper eq. (algo7) with nu = -lambda).

    nu <- clip(nu + c(n) * violation, 0, bound), where ``violation`` estimates
    S^(k)(theta) - alpha^(k) (the paper uses w_0^(k)T phi_0(s_0)), shape (M,).
    """
    return project_multipliers(penalties + step * violation, bound)


def pi_multiplier_step(
    integral: Array, violation: Array, step: Array, bound: Array, gain: Array
) -> tuple[Array, Array]:
    """Projected multiplier update with an optional proportional term (PI control, as in
    PID-Lagrangian, Stooke et al. 2020), shared by the constrained learners.

    nu_I <- clip(nu_I + c(n) violation, 0, bound)   (paper eq. (algo7) with nu = -lambda)
    nu   <- clip(nu_I + gain * violation, 0, bound)

    ``gain = 0`` is the paper's update (nu = nu_I). At a fixed point violation = 0 the
    proportional term vanishes, so the equilibria are the paper's.

    Args:
        integral: nu_I, (M,). violation: estimate of S^(k) - alpha^(k), (M,).
        step: c(n). bound: -P. gain: K_p >= 0.
    Returns:
        (penalties nu used by the learner, new integral nu_I), both (M,).
    """
    integral = multiplier_step(integral, violation, step, bound)
    return project_multipliers(integral + gain * violation, bound), integral


def lambda_returns(stage: Array, terminal: Array, next_values: Array, trace: Array) -> Array:
    """lambda-returns G_h = c_h + (1 - trace) V_{h+1}(s_{h+1}) + trace G_{h+1}, G_H = c_H
    (trace 0: the paper's TD(0) targets; 1: Monte-Carlo returns).

    Args:
        stage: c_h, (H, K, ...). terminal: c_H, (K, ...).
        next_values: V_{h+1}(s_{h+1}) for h = 0..H-1, (H, K, ...).
        trace: scalar in [0, 1].
    Returns:
        targets for stages 0..H-1, (H, K, ...).
    """

    def back(g_next, xs):
        c_h, v_next = xs
        g = c_h + (1.0 - trace) * v_next + trace * g_next
        return g, g

    _, g = jax.lax.scan(back, terminal, (stage, next_values), reverse=True)
    return g


# ----------------------------------------------------------------------------- batches


@struct.dataclass
class Batch:
    """K episodes in time-major layout (what the tabular learners consume).

    Attributes (H stages, K episodes, M constraints):
        states: tabular state indices s_0..s_H, int32 (H+1, K).
        actions: a_h, int32 (H, K).
        rewards: r_h(s_h, a_h, s_{h+1}), (H, K).
        costs: g_h^(k)(s_h, a_h, s_{h+1}), (H, K, M).
        terminal_rewards: r_H(s_H), (K,).
        terminal_costs: g_H^(k)(s_H), (K, M).
    """

    states: Array
    actions: Array
    rewards: Array
    costs: Array
    terminal_rewards: Array
    terminal_costs: Array

    @property
    def episode_rewards(self) -> Array:
        """Total reward of each episode, terminal included, (K,)."""
        return jnp.sum(self.rewards, axis=0) + self.terminal_rewards

    @property
    def episode_costs(self) -> Array:
        """Total cost of each episode and constraint, terminal included, (K, M)."""
        return jnp.sum(self.costs, axis=0) + self.terminal_costs


def batch_from_trajectory(trajectory) -> Batch:
    """Convert a :class:`fhc_jax.rollout.Trajectory` ((K, H) leading axes, tabular state
    indices) to a time-major :class:`Batch`."""
    states = jnp.concatenate([trajectory.states.T, trajectory.next_states[:, -1][None]], axis=0)
    return Batch(
        states=states.astype(jnp.int32),
        actions=jnp.asarray(trajectory.actions, jnp.int32).T,
        rewards=jnp.asarray(trajectory.rewards).T,
        costs=jnp.moveaxis(jnp.asarray(trajectory.costs), 0, 1),
        terminal_rewards=jnp.asarray(trajectory.terminal_rewards),
        terminal_costs=jnp.asarray(trajectory.terminal_costs),
    )


# ----------------------------------------------------------------------------- fast tabular rollout


@struct.dataclass
class TabularModel:
    """Everything a tabular rollout needs, in sampling-friendly form.

    Attributes (S states, A actions, N successors per state-action, H stages, M constraints):
        next_states: successor indices, int32 (S, A, N) or (H, S, A, N).
        cdf: cumulative successor probabilities, same shape.
        last: index of the last successor with positive probability, int32 (S, A) or (H, S, A).
        rewards / costs: realised single-stage signals, indexed as set by ``signal``:
            "arrival": r[h, s'] (H, S) and g[k, h, s'] (M, H, S) (GridWorld: paid on arrival);
            "expected": r[h, s, a] (H, S, A) and (M, H, S, A);
            "full": r[h, s, a, s'] (H, S, A, S) and (M, H, S, A, S).
        terminal_rewards: r_H, (S,); terminal_costs: g_H, (M, S).
        initial_cdf: cumulative beta, (S,).
        signal: static, see above. time_varying: static.
        step_env: static; where set (environments with a closed-form step from one uniform,
            ``noise_from_uniform``, such as ``GridWorld``), rollouts draw successors and signals
            through ``step_env.transition`` instead of the N-way successor table: the same
            distribution, one table lookup instead of an N-way inverse-CDF search.
        step_params: the params ``step_env`` is stepped with (a pytree; None otherwise).
    """

    next_states: Array
    cdf: Array
    last: Array
    rewards: Array
    costs: Array
    terminal_rewards: Array
    terminal_costs: Array
    initial_cdf: Array
    signal: str = struct.field(pytree_node=False, default="expected")
    time_varying: bool = struct.field(pytree_node=False, default=False)
    step_env: Any = struct.field(pytree_node=False, default=None)
    step_params: Any = None

    @property
    def num_constraints(self) -> int:
        return self.costs.shape[0]


def _steps_itself(env) -> bool:
    """Whether ``env`` has a closed-form step from one uniform and can rebuild states from
    (index, stage): then :func:`rollout_tabular` steps it directly (``TabularModel.step_env``)."""
    return getattr(env, "noise_from_uniform", None) is not None and type(env).state_at is not Environment.state_at


def _successor_form(transitions, num_states: int) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(transitions, SparseTransitions):
        return np.asarray(transitions.next_states), np.asarray(transitions.probabilities, np.float64)
    dense = np.asarray(transitions, np.float64)
    nxt = np.broadcast_to(np.arange(num_states, dtype=np.int32), dense.shape)
    return nxt, dense


def tabular_model(env, params, dtype=jnp.float32) -> TabularModel:
    """Build the fast-rollout model of a tabular environment (host-side).

    GridWorld-like environments (with ``transition_kernel(params)`` and arrival maps
    ``params.reward_map`` / ``params.cost_map``) keep the exact per-transition signals of
    ``env.step``; any other environment is read through ``env.to_cmdp(params)``, whose
    rewards are per next state (H, S, A, S) or expected (H, S, A), exactly what a tabular
    environment built from that model pays.
    """
    if hasattr(env, "transition_kernel") and hasattr(params, "reward_map") and hasattr(params, "cost_map"):
        kernel = env.transition_kernel(params)
        nxt, prob = _successor_form(kernel, env.num_states)
        signal = "arrival"
        rewards, costs = params.reward_map, params.cost_map
        term_r, term_c, beta = params.terminal_rewards, params.terminal_costs, params.initial_distribution
        time_varying = tr.is_time_varying(kernel)
    else:
        cmdp: TabularCMDP = env.to_cmdp(params)
        nxt, prob = _successor_form(cmdp.transitions, cmdp.num_states)
        signal = "full" if cmdp.rewards.ndim == 4 else "expected"
        rewards, costs = cmdp.rewards, cmdp.costs
        if signal == "expected" and cmdp.costs.ndim == 5:
            costs = cmdp.expected_costs()
        if signal == "full" and cmdp.costs.ndim == 4:
            costs = jnp.broadcast_to(cmdp.costs[..., None], cmdp.costs.shape + (cmdp.num_states,))
        term_r, term_c, beta = cmdp.terminal_rewards, cmdp.terminal_costs, cmdp.initial_distribution
        time_varying = cmdp.time_varying
    steps_itself = _steps_itself(env)
    cdf = np.cumsum(prob, axis=-1)
    n = prob.shape[-1]
    last = (n - 1 - np.argmax(prob[..., ::-1] > 0, axis=-1)).astype(np.int32)
    return TabularModel(
        next_states=jnp.asarray(nxt, jnp.int32),
        cdf=jnp.asarray(cdf, dtype),
        last=jnp.asarray(last),
        rewards=jnp.asarray(rewards, dtype),
        costs=jnp.asarray(costs, dtype),
        terminal_rewards=jnp.asarray(term_r, dtype),
        terminal_costs=jnp.asarray(term_c, dtype),
        initial_cdf=jnp.asarray(np.cumsum(np.asarray(beta, np.float64)), dtype),
        signal=signal,
        time_varying=time_varying,
        step_env=env if steps_itself else None,
        step_params=params if steps_itself else None,
    )


def _uniform(key: Array, shape: tuple[int, ...], dtype) -> Array:
    """``jax.random.uniform`` through the rollout module's unrolled threefry when it applies
    (bit-identical stream, several times faster on CPU)."""
    return jax.random.uniform(fast_key(key)[0], shape, dtype)


def inverse_cdf(cdf: Array, u: Array, last: Array | int) -> Array:
    """Index i with cdf[i-1] <= u * cdf[-1] < cdf[i] (one uniform per draw), int32.

    Args:
        cdf: (..., n) non-decreasing cumulative weights (need not end exactly at 1).
        u: (...) uniforms in [0, 1).
        last: (...) or scalar, the last index with positive weight (guards rounding).
    """
    target = u * cdf[..., -1]
    i = jnp.sum(cdf <= target[..., None], axis=-1).astype(jnp.int32)
    return jnp.minimum(i, last)


def rollout_tabular(
    key: Array,
    model: TabularModel,
    policy_xs: Any,
    action_cdf: Callable[[Any, Array], Array],
    num_episodes: int,
) -> Batch:
    """K episodes of a tabular model under a non-stationary policy, ``lax.scan`` over stages.

    Randomness: one uniform per episode for s_0 and two per (stage, episode) (action, then
    successor) from one threefry block (:func:`fhc_jax.rollout.uniform_pairs`), drawn up front;
    each key is used once. The successor uniform goes to the environment's own step where the
    model has one (``TabularModel.step_env``), else to an inverse-CDF search of the successor
    table.

    Args:
        key: PRNG key.
        model: :class:`TabularModel`.
        policy_xs: per-stage policy data with a leading H axis (scanned over), e.g. the
            cumulative policy table (H, S, A) or per-stage logits parameters.
        action_cdf: ``action_cdf(xs_h, states (K,)) -> (K, A)`` cumulative action weights.
        num_episodes: K.
    Returns:
        :class:`Batch`.
    """
    k_init, k_steps = jax.random.split(key)
    horizon = model.rewards.shape[0]
    u0 = _uniform(k_init, (num_episodes,), model.cdf.dtype)
    u = uniform_pairs(k_steps, (horizon, num_episodes))  # complex64: (action, successor) uniforms
    s0 = inverse_cdf(model.initial_cdf, u0, model.initial_cdf.shape[0] - 1)
    hs = jnp.arange(horizon, dtype=jnp.int32)

    def env_step(u, s, a, h):
        env, p = model.step_env, model.step_params
        _, state, r, g, _, _ = env.transition(env.noise_from_uniform(u, p), env.state_at(s, h), a, p)
        return env.state_index(state), r.astype(model.rewards.dtype), g.astype(model.costs.dtype)

    def step(s, xs):
        pol_h, u_h, h, kern_h = xs
        cdf_a = action_cdf(pol_h, s)
        a = inverse_cdf(cdf_a, u_h.real.astype(cdf_a.dtype), cdf_a.shape[-1] - 1)
        if model.step_env is not None:
            s2, r, g = jax.vmap(env_step, in_axes=(0, 0, 0, None))(u_h.imag, s, a, h)
            return s2, (s, a, r, g)
        nxt, cdf, last = kern_h if model.time_varying else (model.next_states, model.cdf, model.last)
        j = inverse_cdf(cdf[s, a], u_h.imag.astype(cdf.dtype), last[s, a])
        s2 = nxt[s, a, j]
        if model.signal == "arrival":
            r = model.rewards[h, s2]
            g = model.costs[:, h, s2].T
        elif model.signal == "expected":
            r = model.rewards[h, s, a]
            g = model.costs[:, h, s, a].T
        else:
            r = model.rewards[h, s, a, s2]
            g = model.costs[:, h, s, a, s2].T
        return s2, (s, a, r, g)

    kern_xs = (model.next_states, model.cdf, model.last) if model.time_varying else None
    s_final, (s, a, r, g) = jax.lax.scan(step, s0, (policy_xs, u, hs, kern_xs))
    return Batch(
        states=jnp.concatenate([s, s_final[None]], axis=0),
        actions=a,
        rewards=r,
        costs=g,
        terminal_rewards=model.terminal_rewards[s_final],
        terminal_costs=model.terminal_costs[:, s_final].T,
    )


def rollout_policy_table(key: Array, model: TabularModel, table: Array, num_episodes: int) -> Batch:
    """K episodes under a tabulated non-stationary policy ``table`` (H, S, A) (rows sum to 1).

    The learners that act through networks tabulate their policy once per iteration (one
    batched forward pass over all (h, s)) and roll out from the table: same distribution as
    acting per sample, far cheaper for tabular environments.
    """
    return rollout_tabular(key, model, jnp.cumsum(table, axis=-1), lambda cdf_h, s: cdf_h[s], num_episodes)


# ----------------------------------------------------------------------------- observations


def observation_table(env, params, observation: str | None = None) -> Array:
    """The encoded observation of every state at every stage h = 0..H:
    ``table[h, s] = encoder(env, env.state_at(s, h))``, (H+1, S, *obs_shape), float32.

    Args:
        env, params: the environment.
        observation: encoder name ("xy", "xyt", "one_hot", "index"; see
            :mod:`fhc_jax.envs.encoders`), or None for the environment's own encoder. A learner
            whose config chooses its input (e.g. the baselines' "Env 1" / "Env 2") passes it here.
    Raises:
        ValueError: an encoder the environment does not support.

    Network learners gather their inputs from it (:func:`batch_observations`): the stage-H
    rows feed the terminal critics V_H, W_H.
    """
    if observation is None:
        encode = lambda state: env.observation(state, params)
    else:
        encoder = make_encoder(type(env).__name__, observation, env.supported_observations)
        encode = lambda state: encoder(env, state)
    hs = jnp.arange(env.horizon + 1, dtype=jnp.int32)
    ss = jnp.arange(env.num_states, dtype=jnp.int32)
    table = jax.vmap(lambda h: jax.vmap(lambda s: encode(env.state_at(s, h)))(ss))(hs)
    return jnp.asarray(table, jnp.float32)


def batch_observations(table: Array, states: Array) -> Array:
    """Observations of time-major states (L, K) at stages 0..L-1: ``table[h, states[h]]``,
    (L, K, *obs_shape)."""
    hs = jnp.arange(states.shape[0], dtype=jnp.int32)[:, None]
    return table[hs, states]


def observation_to_index(env) -> Callable[[Array], Array]:
    """``obs -> tabular state index`` for the environment's observation encoder: "index"
    (itself), "one_hot" (argmax), "xy"/"xyt" on square grids (rounded coordinates)."""
    name = env.encoder.name
    if name == "index":
        return lambda obs: jnp.asarray(obs, jnp.int32)
    if name == "one_hot":
        return lambda obs: jnp.argmax(obs).astype(jnp.int32)
    size = getattr(env, "size", None)
    if name in ("xy", "xyt") and isinstance(size, int):
        def decode(obs):
            col = jnp.round(obs[0] * (size - 1)).astype(jnp.int32)
            row = jnp.round(obs[1] * (size - 1)).astype(jnp.int32)
            return row * size + col
        return decode
    raise ValueError(f"policy: cannot recover the state index from {type(env).__name__} observations {name!r}")


def sampling_policy(cdf_of: Callable[[Array, Array], Array]) -> Callable[[Array, Array, Array], Array]:
    """A :data:`fhc_jax.rollout.Policy` ``act(key, observation, h) -> action`` that samples by
    inverse CDF from ``cdf_of(observation, h)`` (cumulative action weights, (A,)), with one
    uniform per call; it implements the fast protocol ``action_from_uniform`` of
    :func:`fhc_jax.rollout` (``act(key, ...) == action_from_uniform(uniform(key), ...)``)."""

    def action_from_uniform(u: Array, observation: Array, h: Array) -> Array:
        cdf = cdf_of(observation, h)
        return inverse_cdf(cdf, u, cdf.shape[-1] - 1)

    def act(key: Array, observation: Array, h: Array) -> Array:
        return action_from_uniform(jax.random.uniform(key, (), jnp.float32), observation, h)

    act.action_from_uniform = action_from_uniform
    return act


def table_policy(table: Array, env) -> Callable[[Array, Array, Array], Array]:
    """:func:`sampling_policy` of a policy table (H, S, A) in ``env``: recovers the state index
    from the environment's observation (:func:`observation_to_index`). The returned function
    closes over the table: pass it to ``rollout`` un-jitted, or build it inside the jitted
    function that calls ``rollout``."""
    cdf = jnp.cumsum(table, axis=-1)
    to_index = observation_to_index(env)
    return sampling_policy(lambda observation, h: cdf[h, to_index(observation)])


# ----------------------------------------------------------------------------- advantages


def finite_horizon_gae(rewards: Array, values: Array, gamma: Array = 1.0, lam: Array = 1.0) -> tuple[Array, Array]:
    """Generalised advantage estimation over a fixed horizon (Schulman et al. 2016), with no
    bootstrapping past H: ``values[H]`` is the value of the final state, e.g. the exact terminal
    reward r_H(s_H) (or terminal cost g_H).

    delta_h = r_h + gamma V_{h+1} - V_h;  A_h = delta_h + gamma lam A_{h+1}, A_H = 0;
    returns R_h = A_h + V_h (the lambda-return targets of the critic).

    Args:
        rewards: r_h, time-major (H, K, ...).
        values: V_0..V_H at the visited states, (H+1, K, ...).
        gamma, lam: discount and GAE parameter in [0, 1] (scalars; vmappable).
    Returns:
        (advantages (H, K, ...), returns (H, K, ...)).
    """
    gamma = jnp.asarray(gamma, rewards.dtype)
    lam = jnp.asarray(lam, rewards.dtype)
    deltas = rewards + gamma * values[1:] - values[:-1]

    def back(adv_next, delta):
        adv = delta + gamma * lam * adv_next
        return adv, adv

    _, adv = jax.lax.scan(back, jnp.zeros_like(deltas[0]), deltas, reverse=True)
    return adv, adv + values[:-1]


# ----------------------------------------------------------------------------- training loop


@struct.dataclass
class ExactMetrics:
    """Exact evaluation of the learner's policy at a few iterations.

    Attributes (E evaluations, M constraints):
        iteration: number of updates done when evaluated, int32 (E,) (0 = initial policy).
        reward: exact J(pi), (E,).
        costs: exact S^(k)(pi), (E, M).
    """

    iteration: Array
    reward: Array
    costs: Array


def evaluation_iterations(num_iterations: int, eval_every: int) -> np.ndarray:
    """Iterations (updates done) at which :func:`scan_with_evaluation` evaluates: 0, E, 2E,
    ..., and always the final one ``num_iterations``. ``eval_every = 0``: 0 and the final."""
    if eval_every <= 0 or eval_every >= num_iterations:
        return np.array([0, num_iterations], dtype=np.int32)
    marks = list(range(0, num_iterations + 1, eval_every))
    if marks[-1] != num_iterations:
        marks.append(num_iterations)
    return np.array(marks, dtype=np.int32)


def scan_with_evaluation(
    step_fn: Callable[[Any, Any], tuple[Any, Any]],
    carry: Any,
    num_iterations: int,
    eval_every: int,
    evaluate_fn: Callable[[Any], tuple[Array, Array]],
) -> tuple[Any, Any, ExactMetrics]:
    """Run ``step_fn`` ``num_iterations`` times with ``lax.scan``, evaluating exactly every
    ``eval_every`` iterations, without ``lax.cond`` (which ``vmap`` turns into evaluating
    every iteration): an outer scan over blocks of ``eval_every`` iterations, an inner scan
    inside each block, then a scan over the remainder.

    Args:
        step_fn: ``(carry, None) -> (carry, metrics)``; per-iteration metrics must be small
            (they are stacked: memory O(num_iterations), independent of K and H).
        carry: initial carry.
        num_iterations: static N >= 1.
        eval_every: static E; 0 evaluates only the initial and final carries.
        evaluate_fn: ``carry -> (reward (), costs (M,))``, e.g. exact evaluation of the policy.
    Returns:
        (final carry, stacked per-iteration metrics with leading axis N, :class:`ExactMetrics`).
    """
    marks = evaluation_iterations(num_iterations, eval_every)
    block = int(marks[1] - marks[0]) if len(marks) > 2 else num_iterations
    num_blocks = num_iterations // block
    rem = num_iterations - num_blocks * block

    r0, c0 = evaluate_fn(carry)

    def run_block(c, _):
        c, m = jax.lax.scan(step_fn, c, None, length=block)
        return c, (m, evaluate_fn(c))

    carry, (metrics, (rs, cs)) = jax.lax.scan(run_block, carry, None, length=num_blocks)
    metrics = jax.tree.map(lambda x: x.reshape((num_blocks * block,) + x.shape[2:]), metrics)
    rewards, costs = [r0[None], rs], [c0[None], cs]
    if rem:
        carry, m_rem = jax.lax.scan(step_fn, carry, None, length=rem)
        metrics = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), metrics, m_rem)
        r_f, c_f = evaluate_fn(carry)
        rewards.append(r_f[None])
        costs.append(c_f[None])
    exact = ExactMetrics(
        iteration=jnp.asarray(marks),
        reward=jnp.concatenate(rewards),
        costs=jnp.concatenate(costs),
    )
    return carry, metrics, exact


def resolve_hyperparameters(config: Any, hparams: Any | None) -> Any:
    """``hparams`` if given (numeric leaves possibly traced or vmapped), else ``config``.

    Raises:
        ValueError: ``hparams`` whose static fields differ from ``config``'s (they set shapes
            and code paths, so they cannot change without recompiling).
    """
    if hparams is None:
        return config
    if jax.tree.structure(hparams) != jax.tree.structure(config):
        statics = ", ".join(getattr(type(config), "_static_fields", ()))
        raise ValueError(
            f"train: the hyperparameters passed to train(key, hparams) must have the same static "
            f"fields ({statics}) as the {type(config).__module__}.{type(config).__name__} given to make_train"
        )
    return hparams


@struct.dataclass
class Carry:
    """The training loop's carry: the learner's train state and the PRNG key of the next
    iteration (everything a checkpoint must hold to resume bit-identically)."""

    state: Any
    key: Array


@dataclasses.dataclass(frozen=True)
class Learner:
    """A learner bound to one environment, as the iteration-level pure functions every training
    loop is built from: ``make_train``'s single ``lax.scan`` (:func:`run`) and the chunked,
    checkpointed runs of :mod:`fhc_jax.experiment`. All are traceable; ``vmap`` them over seeds
    (keys) and numeric hyperparameters.

    Attributes:
        config: the learner's frozen ``Config`` (static fields fixed here).
        init: ``(key, hparams) -> Carry``: initial train state and loop key.
        step: ``(carry, hparams) -> (carry, metrics)``: one rollout + update; ``metrics`` is a
            dict of small per-iteration arrays (independent of K and H).
        evaluate: ``carry -> (exact reward (), exact costs (M,))`` of the current policy.
        policy_table: ``train_state -> (H, S, A)``, the current policy for exact evaluation.
    """

    config: Any
    init: Callable[[Array, Any], Carry]
    step: Callable[[Carry, Any], tuple[Carry, dict[str, Array]]]
    evaluate: Callable[[Carry], tuple[Array, Array]]
    policy_table: Callable[[Any], Array]


def run(learner: Learner, key: Array, hparams: Any | None = None) -> tuple[Any, dict[str, Array], ExactMetrics]:
    """A whole training run in one ``lax.scan`` (jit it, vmap it over keys/hyperparameters).

    Args:
        learner: :class:`Learner`.
        key: PRNG key of the run.
        hparams: optional hyperparameters (same static fields as ``learner.config``).
    Returns:
        (final train state, per-iteration metrics dict with leading axis ``num_iterations``,
        :class:`ExactMetrics` every ``config.eval_every`` updates).
    """
    cfg = resolve_hyperparameters(learner.config, hparams)
    carry = learner.init(key, cfg)
    carry, metrics, exact = scan_with_evaluation(
        lambda c, _: learner.step(c, cfg), carry, cfg.num_iterations, cfg.eval_every, learner.evaluate
    )
    return carry.state, metrics, exact


def exact_evaluator(cmdp: TabularCMDP) -> Callable[[Array], tuple[Array, Array]]:
    """``policy (H, S, A) -> (exact reward (), exact costs (M,))`` with ``fhc_jax.evaluate``
    (traceable; for use inside the jitted training loop)."""

    def fn(policy: Array) -> tuple[Array, Array]:
        ev = evaluate(cmdp, policy)
        return ev.reward, ev.costs

    return fn
