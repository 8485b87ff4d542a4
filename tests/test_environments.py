"""The environment registry (fhc_jax.experiment.config): settings declared by constructors,
validated per environment before anything compiles; and an environment written outside fhc_jax
(tests/toy_env.py) trained from the command line and judged exactly against the optimum."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.cli import main
from fhc_jax.envs.base import Environment
from fhc_jax.experiment import config, runner, study_file
from fhc_jax.experiment.typed_settings import ConfigError

TOY = "toy_env:ToyEnv"


@pytest.fixture(autouse=True)
def toy_importable(monkeypatch):
    """``toy_env`` importable as a top-level module, as a user's own module would be."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


def test_gridworld_settings_come_from_its_constructor():
    entry = config.load_environment("gridworld")
    kinds = {s.name: s.kind for s in entry.settings}
    assert kinds == {
        "size": "int",
        "horizon": "int",
        "num_constraints": "int",
        "observation": "str",
        "slip": "float",
        "alpha": "float_or_floats",
        "layout_seed": "int",
        "num_phases": "int_or_none",
        "num_hotspots": "int",
        "num_quiet": "int",
    }
    assert entry.defaults["size"] == 10 and entry.defaults["alpha"] == 25.0 and entry.defaults["num_phases"] is None
    assert entry.action_moves.shape == (9, 2)
    env, params = entry.make({"size": 4, "horizon": 6, "alpha": [2]})
    assert isinstance(env, fhc.GridWorld) and env.grid_shape == (4, 4) and env.horizon == 6
    np.testing.assert_allclose(np.asarray(params.thresholds), [2.0])
    assert entry.describe(entry.validate({"size": 4})) == "gridworld (size=4)"


@pytest.mark.parametrize(
    "values, message",
    [
        ({"width": 3}, r"unknown key 'env.width' for environment 'gridworld'; valid keys: env.alpha, .*env.size"),
        ({"size": 2.5}, r"env.size must be an integer, found 2.5 \(float\)"),
        ({"alpha": []}, r"env.alpha must be a number or a non-empty list of numbers"),
        ({"slip": "high"}, r"env.slip must be a number, found 'high' \(str\)"),
    ],
)
def test_gridworld_types_checked_per_key(values, message):
    with pytest.raises(ConfigError, match=message):
        config.load_environment("gridworld").validate(values)


def test_constructor_ranges_reported_as_config_errors():
    with pytest.raises(ConfigError, match=r"env 'gridworld': GridWorld.make_params: slip must be a number in \[0, 1\]"):
        config.make_env("gridworld", {"slip": 1.5})
    with pytest.raises(ConfigError, match=r"ToyEnv: horizon must be >= 1"):
        config.make_env(TOY, {"horizon": 0})


def test_user_environment_keys_are_its_own():
    entry = config.load_environment(TOY)
    assert [(s.name, s.kind, s.default) for s in entry.settings] == [("horizon", "int", 3), ("alpha", "float", 1.0)]
    assert entry.action_moves is None
    with pytest.raises(
        ConfigError,
        match=r"unknown key 'env.size'.* for environment 'toy_env:ToyEnv'; "
        r"valid keys: env.alpha, env.horizon, env.name$",
    ):
        config.load_spec(env=TOY, overrides=["env.size=3"])
    spec = config.load_spec(env=TOY, overrides=["env.alpha=2"])
    assert spec.env == {"horizon": 3, "alpha": 2.0} and spec.env_title() == f"{TOY} (alpha=2)"
    assert config.load_spec(settings=spec.settings()) == spec


def _factory(horizon: int = 2, scale=0.5, required_flag: bool = False) -> Environment:
    from toy_env import ToyEnv

    return ToyEnv(horizon, scale)


def _needs_positional(cmdp, horizon: int = 2):
    raise AssertionError("never called")


def _untyped(horizon=None):
    raise AssertionError("never called")


def _not_an_env(horizon: int = 2):
    return object()


def test_factories_and_refusals(monkeypatch):
    module = __name__
    entry = config.load_environment(f"{module}:_factory")
    assert [(s.name, s.kind) for s in entry.settings] == [
        ("horizon", "int"),
        ("scale", "float"),
        ("required_flag", "bool"),
    ]
    env, _ = entry.make({"scale": 1})
    assert env.horizon == 2
    for name, message in [
        (f"{module}:_needs_positional", "parameter 'cmdp' has no default"),
        (f"{module}:_untyped", "cannot tell the type of setting 'horizon'"),
        ("no_such_module_xyz:Env", "no module named 'no_such_module_xyz': looked in the working directory"),
        (f"{module}:Missing", "has no attribute 'Missing'"),
        ("gridwrld", "unknown environment 'gridwrld'; registered: gridworld"),
    ]:
        with pytest.raises(ConfigError, match=message):
            config.load_environment(name)
    with pytest.raises(ConfigError, match="returned object, not an fhc_jax.envs.Environment"):
        config.make_env(f"{module}:_not_an_env")


def test_compare_refuses_inputs_the_environment_lacks():
    with pytest.raises(
        ConfigError,
        match=r"input 'xy' of PPO-Lagrangian \(xy\) is not supported by "
        r"environment 'toy_env:ToyEnv' \(its observations: one_hot, index\)",
    ):
        study_file.build_specs(study_file.select_runs(["fh-constrained", "ppo-lag"], ["xy"]), 2, env=TOY)


@pytest.mark.slow
def test_toy_environment_trained_from_the_cli_and_judged_exactly(tmp_path, monkeypatch, capsys):
    """The worked example: an environment defined outside fhc_jax, trained by ``fhc-jax train
    --env toy_env:ToyEnv``, its run directory judged against the exact optimum."""
    out = tmp_path / "toy"
    argv = [
        "train",
        "--env",
        TOY,
        "--seeds",
        "2",
        "--set",
        "env.horizon=4",
        "--set",
        "env.alpha=1.5",
        "--set",
        "num_iterations=30",
        "--set",
        "episodes_per_iteration=8",
        "--set",
        "run.chunk_size=10",
        "--out",
        str(out),
        "--quiet",
    ]
    assert main(argv) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["env"] == {"name": TOY, "horizon": 4, "alpha": 1.5} and f"--env {TOY}" in cfg["rerun"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env"] == TOY and summary["env_title"] == f"{TOY} (horizon=4, alpha=1.5)"
    # two lanes, H = 4: the safe lane pays 0.5 per stage, alpha = 1.5 buys 1.5 stages in the fast lane
    assert summary["optimum"]["reward"] == pytest.approx(0.5 * 4 + 0.5 * 1.5, abs=1e-5)
    assert summary["optimum"]["costs"] == pytest.approx([1.5], abs=1e-5)
    env, params = config.make_env(TOY, {"horizon": 4, "alpha": 1.5})
    with np.load(out / "policy.npz") as f:
        assert f["policy"].shape == (2, 4, 2, 2) and "grid_shape" not in f.files  # not spatial: no policy maps
        for row, table in zip(summary["seeds"], f["policy"]):
            ev = fhc.evaluate(env.to_cmdp(params), table)
            assert row["exact_reward"] == pytest.approx(float(ev.reward), rel=1e-5)
            assert row["exact_costs"] == pytest.approx(np.asarray(ev.costs).tolist(), rel=1e-5)
            assert row["feasible"] == (row["exact_costs"][0] <= 1.5 * 1.02 + 1e-9)
            assert row["fraction_of_optimum"] == pytest.approx(row["exact_reward"] / summary["optimum"]["reward"])
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "learning_curves.png",
        "multipliers.png",
        "stage_costs.png",
    ]
    # a resumed run on a user environment refuses a changed environment setting
    assert main(["train", "--resume", "--env", TOY, "--set", "env.alpha=1.0", "--out", str(out)]) == 2
    assert "env.alpha: 1.5 -> 1.0" in capsys.readouterr().err


def test_environment_without_thresholds_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    """An environment with neither an exact model nor ``thresholds(params)`` cannot be judged:
    refused with a usage error naming the missing member, before anything compiles or is written."""
    from toy_env import ToyEnv

    monkeypatch.setattr(ToyEnv, "has_exact_model", property(lambda self: False))
    monkeypatch.setattr(runner.ChunkedTrainer, "__init__", lambda *a, **k: pytest.fail("compiled"))
    assert main(["train", "--env", TOY, "--out", str(tmp_path / "never")]) == 2
    assert "must define thresholds(params)" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()
