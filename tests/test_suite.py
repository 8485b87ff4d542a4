"""fhc_jax.envs.suite (the robustness suite) and fhc_jax.envs.inventory: every exactly judged
threshold binds, rescaled copies keep the optimal policy and scale nu*, the inventory problem's
own environment agrees with its exact model (step by step and by Monte-Carlo), the documented
own-environment example runs, and the robustness benchmark records a failing learner instead
of crashing."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.envs import suite
from fhc_jax.envs.admission import WardAdmission
from fhc_jax.envs.inventory import InventoryEnv, unconstrained_lost_sales
from fhc_jax.experiment import judge

ROOT = Path(__file__).resolve().parents[1]
Z = 4.0  # standard errors allowed between a Monte-Carlo mean and the exact value


class _Solved(Mapping):
    """name -> (cmdp, solve, (C_min, C_free)) of every exactly judged task, each solved when a
    test first reads it (the fast tier's tests read a few; all 31 take about 20 s)."""

    def __init__(self):
        self._names, self._done = suite.task_names("exact"), {}

    def __getitem__(self, name: str):
        if name not in self._names:
            raise KeyError(name)
        if name not in self._done:
            cmdp = suite.task(name).cmdp()
            self._done[name] = (cmdp, fhc.solve(cmdp), suite.cost_range(cmdp))
        return self._done[name]

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@pytest.fixture(scope="module")
def solved() -> Mapping:
    return _Solved()


def test_registry_names_judgements_and_errors():
    assert len(suite.task_names("exact")) >= 8
    assert suite.task_names("reference") == ["battery", "battery_continuous"]
    assert suite.task_names("budget") == ["pendulum"]
    assert set(suite.task_names()) == set(suite.TASKS)
    for t in suite.TASKS.values():
        assert t.description and "\n" not in t.description
    with pytest.raises(ValueError, match="unknown task 'nope'; valid tasks: gridworld"):
        suite.task("nope")
    with pytest.raises(ValueError, match="judgement must be one of"):
        suite.task_names("approximate")
    with pytest.raises(ValueError, match="judged by Monte-Carlo"):
        suite.task("pendulum").cmdp()
    env, params = suite.task("inventory").make()
    assert suite.task("inventory").make()[0] is env  # built once: jit caches are shared


@pytest.mark.slow
def test_every_exact_threshold_binds(solved):
    for name, (cmdp, best, (least, free)) in solved.items():
        alpha = np.asarray(cmdp.thresholds, np.float64)
        assert np.all(best.costs <= alpha * (1 + 1e-6) + 1e-9), (name, best.costs, alpha)
        assert np.all(best.multipliers > 0), (name, best.multipliers)
        assert np.all(least < alpha) and np.all(alpha < free), (name, least, alpha, free)
        assert best.reward < fhc.solve_unconstrained(cmdp).reward, name
    assert float(solved["gridworld"][0].thresholds[0]) == 25.0
    assert solved["garnet_m2"][0].num_constraints == 2
    nus = np.concatenate([best.multipliers for _, best, _ in solved.values()])
    assert nus.max() / nus.min() >= 1e4


@pytest.mark.slow
def test_small_sizes_and_time_varying_garnets(solved):
    for name, (cmdp, _, _) in solved.items():
        if name != "gridworld":
            assert 10 <= cmdp.horizon <= 40, name
    sizes = {name: solved[name][0].num_states for name in ("garnet_s20", "garnet_s50", "garnet_s100")}
    assert sizes == {"garnet_s20": 20, "garnet_s50": 50, "garnet_s100": 100}
    for name in ("garnet_s20", "garnet_s50", "garnet_s100", "garnet_m2"):
        cmdp = solved[name][0]
        assert cmdp.time_varying and 4 <= cmdp.num_actions <= 6 and 3 <= cmdp.transitions.next_states.shape[-1] <= 5


@pytest.mark.slow
def test_grown_tasks_sit_at_their_threshold_fractions(solved):
    """Each ``<task>_fNN`` task's threshold lies NN% of the way from the least cost to the
    unconstrained optimum's, the maintenance budgets at 15%, a few percent of H / 100; tighter
    thresholds cost the optimum more reward and need a larger nu*."""
    grown = [n for n in solved if re.search(r"_f\d\d$", n)]
    assert len(grown) == 15
    for name in grown:
        cmdp = solved[name][0]
        f = int(name[-2:]) / 100
        np.testing.assert_allclose(suite.threshold_fractions(cmdp), f, rtol=1e-6, err_msg=name)
    for name in ("maintenance", "maintenance_events"):
        cmdp = solved[name][0]
        np.testing.assert_allclose(suite.threshold_fractions(cmdp), suite.MAINTENANCE_FRACTION, rtol=1e-6)
        assert float(cmdp.thresholds[0]) < 0.1 * cmdp.horizon / 100  # a rare-event budget
    for base in ("gridworld5", "inventory", "garnet_s50"):
        rewards = [solved[f"{base}_{s}"][1].reward for s in ("f15", "f50", "f85")]
        nus = [float(solved[f"{base}_{s}"][1].multipliers[0]) for s in ("f15", "f50", "f85")]
        assert rewards[0] < rewards[1] < rewards[2] and nus[0] > nus[1] > nus[2], (base, rewards, nus)
    np.testing.assert_allclose(suite.threshold_fractions(solved["garnet_s20"][0]), 0.5, rtol=1e-6)


def test_negative_garnet_is_garnet_s20_minus_one_per_stage(solved):
    """Every reward of ``garnet_s20_negative`` is negative, its optimum is garnet_s20's minus H
    with the same nu*, and its fraction of the optimum is 1 - (J* - J) / |J*|."""
    cmdp, best, _ = solved["garnet_s20_negative"]
    base, base_best, _ = solved["garnet_s20"]
    assert float(jnp.max(cmdp.rewards)) < 0 and best.reward < 0
    np.testing.assert_allclose(best.reward, base_best.reward - cmdp.horizon, rtol=1e-6)
    np.testing.assert_allclose(best.multipliers, base_best.multipliers, rtol=1e-4)
    uniform = jnp.full((cmdp.horizon, cmdp.num_states, cmdp.num_actions), 1.0 / cmdp.num_actions)
    j = float(fhc.evaluate(cmdp, uniform).reward)
    judged = judge.judge([j], [[0.0]], [1e9], optimum=judge.optimum(cmdp))
    frac = float(judged.fraction_of_optimum[0])
    assert frac == pytest.approx(1 - (best.reward - j) / abs(best.reward), rel=1e-5) and 0 < frac < 1


def test_maintenance_pays_the_same_breakdowns_as_probabilities_and_as_events():
    """The two maintenance models share their process and their expected breakdowns under any
    policy; always maintaining never breaks the machine (C_min = 0); bad settings are named."""
    from fhc_jax.envs.maintenance import maintenance

    prob, events = maintenance("probability"), maintenance("events")
    np.testing.assert_array_equal(np.asarray(prob.transitions), np.asarray(events.transitions))
    rng = np.random.default_rng(0)
    for _ in range(3):
        table = rng.dirichlet(np.ones(prob.num_actions), size=(prob.horizon, prob.num_states))
        a, b = fhc.evaluate(prob, jnp.asarray(table)), fhc.evaluate(events, jnp.asarray(table))
        np.testing.assert_allclose(a.costs, b.costs, rtol=1e-4)
        np.testing.assert_allclose(a.reward, b.reward, rtol=1e-5)
        assert float(a.costs[0]) > 0
    least, free = suite.cost_range(prob)
    assert least[0] == pytest.approx(0.0, abs=1e-9) and free[0] > 0.1
    with pytest.raises(ValueError, match="maintenance: costs must be one of"):
        maintenance("expected")
    with pytest.raises(ValueError, match="maintenance: wear_loss must be a number in"):
        maintenance(wear_loss=0.5)
    with pytest.raises(ValueError, match="breakdown probability .* reaches .* > 1; lower base_rate"):
        maintenance(base_rate=0.5)


def test_rescaled_copies_keep_the_policy_and_scale_nu(solved):
    """Other units, the same problem: each copy's optimal policy is optimal in the original
    units and the reverse (the optimum mixes two deterministic policies, and rounding may pick
    another optimal mixture), the optimum scales by c_r, its costs by c_c, nu* by c_r / c_c."""
    base_cmdp, base, _ = solved["inventory"]
    for name, (c_r, c_c) in (("inventory_r100_c0.01", (100.0, 0.01)), ("inventory_r0.01_c100", (0.01, 100.0))):
        cmdp, best, _ = solved[name]
        assert best.reward == pytest.approx(base.reward * c_r, rel=1e-5)
        np.testing.assert_allclose(best.costs, base.costs * c_c, rtol=1e-5)
        np.testing.assert_allclose(best.multipliers, base.multipliers * c_r / c_c, rtol=1e-4)
        theirs, ours = fhc.evaluate(base_cmdp, best.policy), fhc.evaluate(cmdp, base.policy)
        assert float(theirs.reward) == pytest.approx(base.reward, rel=1e-5)
        np.testing.assert_allclose(theirs.costs, base.costs, rtol=1e-5)
        assert float(ours.reward) == pytest.approx(best.reward, rel=1e-5)
        np.testing.assert_allclose(ours.costs, best.costs, rtol=1e-5)
        assert np.mean(np.abs(best.policy - base.policy).sum(-1) > 1e-6) < 0.01  # the same up to a few mixed rows


def test_rescale_and_thresholds_validate():
    cmdp = suite.task("garnet_s20").cmdp()
    for bad in (0.0, -1.0, np.inf, "2", True):
        with pytest.raises(ValueError, match="rescale: reward_scale must be a finite number > 0"):
            suite.rescale(cmdp, bad, 1.0)
    with pytest.raises(ValueError, match="rescale: cost_scale"):
        suite.rescale(cmdp, 1.0, 0.0)
    for bad in (0.0, 1.0, (0.5, 0.5)):
        with pytest.raises(ValueError, match=r"fraction must be a number in \(0, 1\) or M = 1"):
            suite.binding_thresholds(cmdp, bad)
    free = cmdp.replace(costs=jnp.zeros_like(cmdp.costs))  # no cost anywhere: nothing to bind
    with pytest.raises(ValueError, match="constraint 0 cannot bind"):
        suite.binding_thresholds(free, 0.5)


def test_garnet_is_seeded_correlated_and_checked():
    a = suite.garnet(20, 4, 10, 3, seed=7, fraction=0.4)  # garnet_s20's shapes: solver programs compiled once
    b = suite.garnet(20, 4, 10, 3, seed=7, fraction=0.4)
    c = suite.garnet(20, 4, 10, 3, seed=8, fraction=0.4)
    np.testing.assert_array_equal(a.transitions.next_states, b.transitions.next_states)
    assert not np.array_equal(np.asarray(a.rewards), np.asarray(c.rewards))
    nxt = np.asarray(a.transitions.next_states)
    assert nxt.shape == (10, 20, 4, 3) and all(len(set(row)) == 3 for row in nxt.reshape(-1, 3))
    least, free = suite.cost_range(a)
    np.testing.assert_allclose(a.thresholds, least + 0.4 * (free - least), rtol=1e-6)
    r, g = np.asarray(a.rewards).ravel(), np.asarray(a.costs)[0].ravel()
    assert np.corrcoef(r, g)[0, 1] > 0.5  # the rewarding actions cost more
    with pytest.raises(ValueError, match=r"garnet: branching must be an integer in \[1, 20\], found 21"):
        suite.garnet(20, 4, 10, 21, seed=0)
    with pytest.raises(ValueError, match="garnet: correlation must be a number in"):
        suite.garnet(20, 4, 10, 3, seed=0, correlation=2.0)


# ----------------------------------------------------------------------------- inventory


def test_inventory_task_is_the_model_of_the_own_environment():
    own, own_params = suite.task("inventory_own").make()
    tab, tab_params = suite.task("inventory").make()
    assert isinstance(own, InventoryEnv) and isinstance(tab, fhc.TabularEnv)
    mine = own.to_cmdp(own_params)
    for field in fhc.TabularCMDP._fields:
        np.testing.assert_array_equal(np.asarray(getattr(mine, field)), np.asarray(getattr(tab_params, field)), field)
    assert (mine.horizon, mine.num_states, mine.num_actions) == (24, 21, 6)
    # the threshold: 60% of the unconstrained optimum's lost sales (numpy DP = fhc.solve_unconstrained)
    free = fhc.solve_unconstrained(mine).costs[0]
    assert unconstrained_lost_sales(mine) == pytest.approx(free, rel=1e-9)
    assert float(mine.thresholds[0]) == pytest.approx(0.6 * free, rel=1e-6)


def test_inventory_steps_match_the_exact_model():
    """Every (stage, stock, order, demand): the environment's step lands on a successor the
    model gives that probability, pays the model's reward for it, and its lost sales average to
    the model's expected cost."""
    env = InventoryEnv()
    params = env.default_params
    cmdp = env.to_cmdp(params)
    h, s, a, d = (
        x.ravel() for x in np.meshgrid(np.arange(24), np.arange(21), np.arange(6), np.arange(16), indexing="ij")
    )
    cdf = np.cumsum(np.asarray(params.demand, np.float64), axis=1)
    lower = np.where(d > 0, cdf[h, np.maximum(d - 1, 0)], 0.0)
    u = (lower + cdf[h, d]) / 2  # a uniform inside demand d's interval

    def step(u, s, a, h):
        _, nxt, reward, costs, done, _ = env.transition(jnp.float32(u), env.state_at(s, h), a, params)
        return nxt.index, nxt.time, reward, costs[0], done

    nxt, time, reward, lost, done = map(np.asarray, jax.jit(jax.vmap(step))(u, s, a, h))
    np.testing.assert_array_equal(time, h + 1)
    np.testing.assert_array_equal(done, h + 1 == 24)
    p = np.asarray(cmdp.transitions)
    assert np.all(p[h, s, a, nxt] > 0)
    np.testing.assert_allclose(reward, np.asarray(cmdp.rewards)[h, s, a, nxt], rtol=1e-6, atol=1e-5)
    pmf = np.asarray(params.demand, np.float64)[h, d]
    expected = np.zeros((24, 21, 6))
    np.add.at(expected, (h, s, a), pmf * lost)
    np.testing.assert_allclose(expected, np.asarray(cmdp.costs)[0], rtol=1e-5, atol=1e-6)
    # the successor law: the model's p_h(s, a, s') is the demand mass that ends at s'
    law = np.zeros_like(p)
    np.add.at(law, (h, s, a, nxt), pmf)
    np.testing.assert_allclose(law, p, atol=1e-6)


def test_inventory_observation_terminal_reward_and_checks():
    env = InventoryEnv()
    params = env.default_params
    state = env.state_at(7, 12)
    np.testing.assert_allclose(env.observation(state, params), [7 / 20, 12 / 24])
    assert env.observation_shape == (2,) and env.observation_dtype == jnp.float32
    assert not hasattr(env, "_encoder")  # its own observation, no encoder
    assert float(env.terminal_reward(state, params)) == pytest.approx(7.0)
    np.testing.assert_allclose(env.to_cmdp(params).terminal_rewards, np.arange(21.0))
    obs, first = env.reset(jax.random.key(0), params)
    assert int(first.index) == 5 and int(first.time) == 0 and obs.shape == (2,)
    assert env == InventoryEnv() and env != InventoryEnv(holding_cost=0.4)
    assert float(InventoryEnv(alpha=3.0).default_params.thresholds[0]) == 3.0
    with pytest.raises(ValueError, match=r"InventoryEnv: max_stock must be an integer >= 1, found 0"):
        InventoryEnv(max_stock=0)
    with pytest.raises(ValueError, match=r"InventoryEnv: seasonal_amplitude must be a finite number in \[0.0, "):
        InventoryEnv(seasonal_amplitude=5.0)
    with pytest.raises(ValueError, match=r"InventoryEnv: initial_stock must be an integer in \[0, 20\], found 21"):
        InventoryEnv(initial_stock=21)


def test_admission_task_is_the_model_of_the_own_environment_and_its_threshold_binds():
    """``admission`` is WardAdmission's exact model as a TabularEnv; the budget of 4 crowded days
    lies 28% of the way from the least crowding (none) to the unconstrained optimum's (about
    14), so nu* > 0 (the numbers WardAdmission's docstring quotes)."""
    own, own_params = suite.task("admission_own").make()
    tab, tab_params = suite.task("admission").make()
    assert isinstance(own, WardAdmission) and isinstance(tab, fhc.TabularEnv)
    mine = own.to_cmdp(own_params)
    for field in fhc.TabularCMDP._fields:
        np.testing.assert_array_equal(np.asarray(getattr(mine, field)), np.asarray(getattr(tab_params, field)), field)
    assert (mine.horizon, mine.num_states, mine.num_actions) == (28, 15, 5)
    np.testing.assert_allclose(np.asarray(mine.transitions).sum(-1), 1.0, atol=1e-6)
    best, free = fhc.solve(mine), fhc.solve_unconstrained(mine)
    assert float(free.reward) == pytest.approx(76.3, abs=0.05) and float(free.costs[0]) == pytest.approx(14.2, abs=0.05)
    assert float(best.reward) == pytest.approx(63.9, abs=0.05) and float(best.multipliers[0]) == pytest.approx(
        1.47, abs=0.01
    )
    assert suite.threshold_fractions(mine)[0] == pytest.approx(0.28, abs=0.005)


def test_admission_steps_match_the_exact_model():
    """Monte-Carlo days from every (occupancy, quota): the successor frequencies, the mean
    admissions and the share of crowded days agree with the model within Z standard errors."""
    env = WardAdmission()
    params = env.default_params
    cmdp = env.to_cmdp(params)
    n = 4000
    keys = jax.random.split(jax.random.key(2), n)
    for b in (0, 7, 12, 14):
        for a in (0, 2, 4):
            state = env.state_at(b, 3)
            step = jax.vmap(lambda k: env.transition(env.noise(k, params), state, a, params))
            _, nxt, reward, cost, done, _ = step(keys)
            p = np.asarray(cmdp.transitions[3, b, a])
            freq = np.bincount(np.asarray(nxt.index), minlength=env.num_states) / n
            assert np.all(np.abs(freq - p) <= Z * np.sqrt(p * (1 - p) / n) + 1e-9), (b, a)
            r = np.asarray(reward, np.float64)
            assert abs(r.mean() - float(cmdp.rewards[3, b, a])) <= Z * max(r.std(), 1e-3) / np.sqrt(n), (b, a)
            c = np.asarray(cost, np.float64)[:, 0]
            assert abs(c.mean() - float(cmdp.costs[0, 3, b, a])) <= Z * max(c.std(), 1e-3) / np.sqrt(n), (b, a)
            assert not bool(np.any(done))
    obs, first = env.reset(jax.random.key(0), params)
    np.testing.assert_allclose(obs, [0.5, 0.0])
    assert int(first.index) == 7 and env == WardAdmission() and env != WardAdmission(crowded=9)


def test_admission_rejects_bad_settings_naming_the_field():
    with pytest.raises(ValueError, match=r"WardAdmission: crowded must be an integer in \[1, 13\], found 14"):
        WardAdmission(crowded=14)
    with pytest.raises(ValueError, match=r"WardAdmission: discharge must be a probability in \[0, 1\], found 1.5"):
        WardAdmission(discharge=1.5)
    with pytest.raises(ValueError, match=r"WardAdmission: alpha must be a finite number >= 0, found -1.0"):
        WardAdmission(alpha=-1.0)


def _play_table(table: np.ndarray, max_stock: int):
    """A policy of InventoryEnv playing a (H, S, A) table at the stock its observation shows."""
    logits = jnp.log(jnp.asarray(table, jnp.float32))

    def policy(key, obs, h):
        return jax.random.categorical(key, logits[h, jnp.round(obs[0] * max_stock).astype(jnp.int32)])

    return policy


@pytest.mark.slow
def test_inventory_monte_carlo_matches_exact_evaluation(solved):
    """The constrained optimum played in the own environment: Monte-Carlo means agree with
    fhc.evaluate of its exact model within Z standard errors."""
    cmdp, best, _ = solved["inventory"]
    exact = fhc.evaluate(cmdp, best.policy)
    env, params = suite.task("inventory_own").make()
    ret = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(
        jax.random.key(3), env, params, _play_table(best.policy, env.max_stock), 20_000
    )
    r, c = np.asarray(ret.rewards, np.float64), np.asarray(ret.costs, np.float64)[:, 0]
    assert abs(r.mean() - float(exact.reward)) <= Z * r.std() / np.sqrt(r.size), (r.mean(), exact.reward)
    assert abs(c.mean() - float(exact.costs[0])) <= Z * c.std() / np.sqrt(c.size), (c.mean(), exact.costs)


@pytest.mark.slow
def test_inventory_docstring_numbers(solved):
    """The numbers the inventory module's docstring quotes."""
    cmdp, best, (least, free) = solved["inventory"]
    assert least[0] == pytest.approx(2.4, abs=0.05) and free[0] == pytest.approx(11.0, abs=0.05)
    assert float(cmdp.thresholds[0]) == pytest.approx(6.6, abs=0.05)
    assert fhc.solve_unconstrained(cmdp).reward == pytest.approx(107, abs=0.5)
    assert best.reward == pytest.approx(102, abs=0.5) and best.multipliers[0] == pytest.approx(2.8, abs=0.05)


# ----------------------------------------------------------------------------- the documented example


def test_documented_own_environment_example_runs():
    """docs/environments.md's own-environment example, run as written: its model is the
    packaged InventoryEnv's, the optimum binds and the Monte-Carlo values match the exact ones."""
    page = (ROOT / "docs" / "environments.md").read_text()
    block = re.search(r"<!-- own-env-example -->(.*?)<!-- /own-env-example -->", page, re.DOTALL)
    assert block, "docs/environments.md lacks the <!-- own-env-example --> block"
    code = "\n".join(re.findall(r"```python\n(.*?)```", block.group(1), re.DOTALL))
    ns: dict = {"__name__": "docs_example"}
    exec(compile(code, "docs/environments.md", "exec"), ns)
    env, cmdp, best, returns = ns["env"], ns["cmdp"], ns["best"], ns["returns"]
    packaged = InventoryEnv(alpha=env.alpha)
    reference = packaged.to_cmdp(packaged.default_params)
    for field in fhc.TabularCMDP._fields:
        np.testing.assert_allclose(
            np.asarray(getattr(cmdp, field)), np.asarray(getattr(reference, field)), rtol=1e-6, atol=1e-7, err_msg=field
        )
    assert float(packaged.default_params.thresholds[0]) == pytest.approx(env.alpha, rel=1e-6)  # the same 60% rule
    assert best.multipliers[0] > 0
    r, c = np.asarray(returns.rewards, np.float64), np.asarray(returns.costs, np.float64)[:, 0]
    assert abs(r.mean() - best.reward) <= Z * r.std() / np.sqrt(r.size)
    assert abs(c.mean() - best.costs[0]) <= Z * c.std() / np.sqrt(c.size)


# ----------------------------------------------------------------------------- the benchmark script


def _benchmark():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import robustness  # benchmarks/ is not a package
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return robustness


def test_benchmark_records_a_failing_learner_and_merges_cells(tmp_path):
    rb = _benchmark()
    task = suite.task("battery_continuous")
    env, params = task.make()
    cell = rb.run_cell("fh_constrained", task, env, params, {"thresholds": [1.0], "nu_star": None}, 2, 20_000)
    assert cell["error"].startswith("make_train: ValueError: ") and "\n" not in cell["error"]
    assert rb.cell_text(cell) == "error"
    keys = rb.seed_keys(3)
    np.testing.assert_array_equal(
        jax.random.key_data(keys[2]), jax.random.key_data(jax.random.fold_in(jax.random.key(424242), 2))
    )
    path = tmp_path / "robustness.json"
    ok = {"num_seeds": 5, "feasible_seeds": 4, "worst_percent": 91.26, "run": "a"}
    path.write_text(
        json.dumps(
            rb.to_json(
                rb.merge(
                    path,
                    "a",
                    {"command": "first"},
                    {"inventory": {"x": 1}},
                    {"cpo": {"inventory": ok, "garnet_s20": ok}},
                )
            )
        )
    )
    merged = rb.merge(path, "b", {"command": "second"}, {}, {"cpo": {"inventory": {**cell, "run": "b"}}})
    assert merged["results"]["cpo"]["garnet_s20"] == ok  # cells not run again are kept
    assert "error" in merged["results"]["cpo"]["inventory"]
    assert set(merged["runs"]) == {"a", "b"} and merged["tasks"] == {"inventory": {"x": 1}}
    assert rb.cell_text(ok) == "91% 4/5" and rb.cell_text({"num_seeds": 5, "feasible_seeds": 5}) == "5/5"
    text = rb.table(merged["results"], ["cpo", "ecop"], ["garnet_s20", "inventory"], rb.cell_text)
    assert "| garnet_s20 | 91% 4/5 | . |" in text and "| inventory | error | . |" in text


def test_parallel_slices_merge_into_the_results_file(tmp_path):
    """benchmarks/gpu/merge_robustness.py: each slice's cells replace the file's, each with its
    run; cells no slice ran are kept; a file that is not a slice is one line and exit 2 before
    anything is written."""
    rb = _benchmark()
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    try:
        import merge_robustness
    finally:
        sys.path.remove(str(ROOT / "benchmarks" / "gpu"))
    cell = lambda pct, run: {"num_seeds": 5, "feasible_seeds": 5, "worst_percent": pct, "run": run}
    out = tmp_path / "robustness.json"
    out.write_text(
        json.dumps(
            rb.to_json(
                rb.merge(
                    out,
                    "old",
                    {"command": "old"},
                    {"inventory": {"x": 0}},
                    {"cpo": {"inventory": cell(50.0, "old"), "garnet_s20": cell(60.0, "old")}},
                )
            )
        )
    )
    parts = []
    for name, learner, task, pct in (("A", "cpo", "inventory", 70.0), ("B", "ecop", "gridworld", 80.0)):
        part = tmp_path / f"robustness_{name}.json"
        part.write_text(
            json.dumps(
                rb.to_json(
                    rb.merge(part, name, {"command": name}, {task: {"x": name}}, {learner: {task: cell(pct, name)}})
                )
            )
        )
        parts.append(str(part))
    assert merge_robustness.main([*parts, "--out", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert merged["results"]["cpo"]["inventory"]["worst_percent"] == 70.0  # replaced by slice A
    assert merged["results"]["cpo"]["garnet_s20"]["worst_percent"] == 60.0  # no slice ran it: kept
    assert merged["results"]["ecop"]["gridworld"]["run"] == "B"
    assert set(merged["runs"]) == {"old", "A", "B"} and merged["tasks"]["gridworld"] == {"x": "B"}
    before = out.read_text()
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert merge_robustness.main([parts[0], str(bad), "--out", str(out)]) == 2
    assert out.read_text() == before
