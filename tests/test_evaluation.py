"""Loading a trained run and judging it again (``fhc_jax.experiment.load_run``, ``fhc-jax eval``):
the exact numbers of summary.json reproduced, a changed environment judged, older and damaged
run directories, the writer's lock, and Monte-Carlo judgement where there is no exact model."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from helpers import TINY_RUN

import fhc_jax as fhc
from fhc_jax.cli import main
from fhc_jax.envs.base import Environment
from fhc_jax.experiment import config, evaluation, judge, load_run, rundir, writer_lock

TINY = TINY_RUN


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One complete tiny gridworld run (2 seeds, final checkpoint at iteration 20)."""
    out = tmp_path_factory.mktemp("runs") / "tiny"
    assert main(["train", "--seeds", "2", *TINY, "--out", str(out), "--quiet", "--no-plots"]) == 0
    return out


def _copy(run: Path, tmp_path: Path, name: str = "copy") -> Path:
    dest = tmp_path / name
    shutil.copytree(run, dest, ignore=shutil.ignore_patterns("eval", rundir.LOCK))
    return dest


def _training_files(run: Path) -> dict[str, str]:
    """sha256 of every file a training run wrote (all but eval/ and the lock file)."""
    return {
        str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run.rglob("*"))
        if p.is_file() and p.name != rundir.LOCK and "eval" not in p.relative_to(run).parts
    }


def _summary_values(run: Path) -> tuple[np.ndarray, np.ndarray]:
    s = json.loads((run / "summary.json").read_text())
    return (np.array([r["exact_reward"] for r in s["seeds"]]), np.array([r["exact_costs"] for r in s["seeds"]]))


# ----------------------------------------------------------------------------- exact


def test_load_run_rebuilds_config_env_states_and_policies(trained):
    run = load_run(trained)
    assert run.config == json.loads((trained / "config.json").read_text())
    env, _ = config.make_env("gridworld", {"size": 3, "horizon": 4, "alpha": 3.0})
    assert run.env == env and run.num_seeds == 2 and run.iteration == 20 and run.verification == "manifest"
    assert run.exact and run.spec.algo == "fh-constrained"
    assert np.shape(run.train_states.step) == (2,) and int(run.train_state(1).step) == 20
    with np.load(trained / "policy.npz") as f:
        np.testing.assert_array_equal(run.policy_tables(), f["policy"])
    # the learner's own policy, usable with fhc_jax.rollout_returns: its Monte-Carlo mean agrees
    # with the exact value of the same policy
    reward, _ = _summary_values(trained)
    n = 20_000
    ret = jax.jit(fhc.rollout_returns, static_argnums=(1, 3, 4))(
        jax.random.key(7), run.env, run.params, run.policy(0), n
    )
    r = np.asarray(ret.rewards, np.float64)
    assert abs(r.mean() - reward[0]) < 5 * r.std() / np.sqrt(n) + 1e-6
    with pytest.raises(ValueError, match=r"seed_index must be an integer in \[0, 1\] \(2 seeds\), found 2"):
        run.policy(2)


def test_eval_reproduces_the_summary_exactly(trained, capsys):
    reward, costs = _summary_values(trained)
    ev = evaluation.evaluate_run(load_run(trained))
    np.testing.assert_allclose(ev.judgement.reward, reward, atol=1e-6, rtol=0)
    np.testing.assert_allclose(ev.judgement.costs, costs, atol=1e-6, rtol=0)

    assert main(["eval", str(trained)]) == 0
    out = capsys.readouterr().out
    assert "exact reward" in out and "gap to opt" in out and "[as trained]" in out and "2 seeds; exact" in out
    record = json.loads((trained / "eval" / "trained.json").read_text())
    summary = json.loads((trained / "summary.json").read_text())
    assert record["judged_by"] == "exact" and record["changes"] == {} and record["iteration"] == 20
    for row, srow in zip(record["seeds"], summary["seeds"]):
        assert abs(row["exact_reward"] - srow["exact_reward"]) <= 1e-6
        assert np.max(np.abs(np.subtract(row["exact_costs"], srow["exact_costs"]))) <= 1e-6
        assert row["feasible"] == srow["feasible"]
        assert row["reward_gap"] == pytest.approx(srow["reward_gap"], abs=1e-6)
    assert record["optimum"]["reward"] == pytest.approx(summary["optimum"]["reward"], abs=1e-9)
    assert record["summary_difference"]["reward"] <= 1e-6 and record["summary_difference"]["costs"] <= 1e-6


def test_eval_on_a_changed_slip_equals_evaluate_on_the_changed_cmdp(trained, capsys):
    before = _training_files(trained)
    assert main(["eval", str(trained), "--set", "env.slip=0.3"]) == 0
    assert "[changed: slip=0.3]" in capsys.readouterr().out
    record = json.loads((trained / "eval" / "slip=0.3.json").read_text())
    assert record["changes"] == {"slip": 0.3} and record["env"]["slip"] == 0.3 and record["env"]["size"] == 3
    assert record["trained_env"]["slip"] == 0.1

    run = load_run(trained)
    env, params = config.make_env("gridworld", {"size": 3, "horizon": 4, "alpha": 3.0, "slip": 0.3})
    cmdp = env.to_cmdp(params)
    reward, _ = _summary_values(trained)
    optimum = fhc.solve(cmdp)
    for r, row in enumerate(record["seeds"]):
        ev = fhc.evaluate(cmdp, run.module.policy_table(run.train_state(r), run.env, run.params))
        assert abs(row["exact_reward"] - float(ev.reward)) <= 1e-6
        assert np.max(np.abs(np.subtract(row["exact_costs"], np.asarray(ev.costs)))) <= 1e-6
        assert abs(row["exact_reward"] - reward[r]) > 1e-3  # the changed environment changed the numbers
        assert row["reward_gap"] == pytest.approx(float(optimum.reward) - row["exact_reward"], abs=1e-6)
        assert row["feasible"] == (row["exact_costs"][0] <= 3.0 * 1.02 + 1e-9)
    assert record["optimum"]["reward"] == pytest.approx(float(optimum.reward), abs=1e-9)
    assert "summary_difference" not in record
    assert _training_files(trained) == before


def test_eval_never_modifies_the_training_files(trained, tmp_path):
    run = _copy(trained, tmp_path)
    before = _training_files(run)
    assert main(["eval", str(run), "--quiet"]) == 0
    assert (
        main(["eval", str(run), "--set", "env.alpha=2.5", "--set", "env.layout_seed=4", "--out", "robust", "--quiet"])
        == 0
    )
    assert main(["eval", str(run), "--set", "env.size=4"]) == 2
    assert _training_files(run) == before
    assert sorted(p.name for p in (run / "eval").iterdir()) == ["robust.json", "trained.json"]
    assert not list((run / "eval").glob(".*"))  # no temporary files left
    # the same --out under other settings is refused (nothing written is lost), the same settings rewrite it
    assert main(["eval", str(run), "--out", "robust", "--quiet"]) == 2
    assert (
        main(
            [
                "eval",
                str(run),
                "--set",
                "env.alpha=2.5",
                "--set",
                "env.layout_seed=4",
                "--out",
                "robust.json",
                "--quiet",
            ]
        )
        == 0
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--set", "env.slipp=0.2"], "unknown key 'env.slipp' (did you mean 'env.slip'?)"),
        (["--set", "env.slip=1.5"], "slip must be a number in [0, 1], found 1.5"),
        (["--set", "env.slip=high"], "env.slip"),
        (["--set", "num_iterations=3"], "fhc-jax eval takes only env.* settings"),
        (["--set", "env.name=battery"], "env.name cannot change"),
        (["--set", "env.size=4"], "the changed environment has 16 states, the policies are tables over 9 states"),
        (["--set", "env.horizon=5"], "has horizon 5, the policies act over 4 stages"),
        (["--episodes", "1"], "--episodes must be an integer >= 2"),
        (["--out", "../elsewhere"], "--out must be a plain file name"),
    ],
)
def test_usage_errors_exit_2_before_anything_compiles(trained, tmp_path, monkeypatch, capsys, argv, message):
    run = _copy(trained, tmp_path)
    monkeypatch.setattr(evaluation, "restore_run", lambda *a, **k: pytest.fail("loaded the checkpoint"))
    assert main(["eval", str(run), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fhc-jax eval: error: ") and message in err and err.count("\n") == 1
    assert not (run / "eval").exists()


# ----------------------------------------------------------------------------- missing, damaged, older


def test_missing_or_damaged_files_are_refused_naming_the_file(trained, tmp_path, capsys):
    def refused(run: Path, status: int, *fragments: str) -> None:
        assert main(["eval", str(run), "--quiet"]) == status
        err = capsys.readouterr().err
        assert err.startswith("fhc-jax eval: error: ") and err.count("\n") == 1, err
        for fragment in fragments:
            assert fragment in err, (fragment, err)
        assert not (run / "eval").exists()

    run = _copy(trained, tmp_path, "no_config")
    (run / "config.json").unlink()
    refused(run, 2, f"{run / 'config.json'} does not exist", "not a run directory written by fhc-jax train")
    with pytest.raises(rundir.RunDirectoryError, match="config.json does not exist"):
        load_run(run)

    run = _copy(trained, tmp_path, "bad_config")
    (run / "config.json").write_text('{"algo": "fh-constr')
    refused(run, 2, f"{run / 'config.json'} is not valid JSON", "restore it")

    run = _copy(trained, tmp_path, "no_checkpoint")
    shutil.rmtree(run / "checkpoints")
    refused(
        run,
        2,
        f"{run / 'checkpoints' / '20'} does not exist",
        "final checkpoint",
        "retrain",
        "fhc-jax train --algo fh-constrained",
    )
    with pytest.raises(rundir.RunDirectoryError, match="checkpoints/20 does not exist"):
        load_run(run)

    # damaged data under the final checkpoint: its manifest's checksums catch it (exit 1, like --resume)
    run = _copy(trained, tmp_path, "damaged")
    for victim in (p for p in (run / "checkpoints" / "20").rglob("*") if p.is_file() and p.parent.name == "d"):
        data = bytearray(victim.read_bytes())  # 32 flipped bytes in the middle of every data file
        mid = len(data) // 2
        data[mid : mid + 32] = bytes(b ^ 0xFF for b in data[mid : mid + 32])
        victim.write_bytes(bytes(data))
    refused(run, 1, f"checkpoint {run / 'checkpoints' / '20'}", "restore the run directory from a copy or retrain")
    assert (run / "checkpoints" / "20").is_dir() and not (run / "rejected_checkpoints").exists()  # nothing moved

    # a checkpoint of another configuration (its manifest's hash differs from config.json's settings)
    run = _copy(trained, tmp_path, "foreign")
    cfg = json.loads((run / "config.json").read_text())
    cfg["settings"]["critic_lr.init"] = 0.123
    (run / "config.json").write_text(json.dumps(cfg))
    refused(run, 1, "written under another configuration")


@pytest.mark.slow
def test_an_incomplete_run_is_refused_with_how_to_finish_it(tmp_path, capsys):
    out = tmp_path / "partial"
    assert (
        main(
            [
                "train",
                "--seeds",
                "1",
                *TINY,
                "--set",
                "run.checkpoint_every=1",
                "--max-chunks",
                "2",
                "--out",
                str(out),
                "--quiet",
                "--no-plots",
            ]
        )
        == 0
    )
    assert main(["eval", str(out)]) == 2
    err = capsys.readouterr().err
    assert "stopped at iteration 10 of 20" in err and f"fhc-jax train --resume --out {out}" in err


@pytest.mark.slow
def test_run_directories_of_another_format_are_refused_with_the_command_to_rerun(trained, tmp_path, capsys):
    """Nothing is upgraded: a run directory written before run directories carried a format
    version, or with another version, is refused by eval, plot and train --resume in one line
    that gives the command which trains it again; that command works."""
    for name, version in (("unversioned", None), ("other", rundir.FORMAT_VERSION + 1)):
        run = _copy(trained, tmp_path, name)
        cfg = json.loads((run / "config.json").read_text())
        cfg.pop("format_version")
        if version is not None:
            cfg["format_version"] = version
        (run / "config.json").write_text(json.dumps(cfg))
        before = _training_files(run)
        for argv in (["eval", str(run)], ["plot", str(run)], ["train", "--resume", "--out", str(run)]):
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "this fhc_jax reads format version" in err, err
            assert "train it again with fhc-jax train --algo fh-constrained --env gridworld --seeds 2" in err
            assert err.rstrip().endswith(f"--overwrite --out {run}")
        with pytest.raises(rundir.RunDirectoryError, match="format version"):
            load_run(run)
        assert _training_files(run) == before
    command = err.rstrip().split("train it again with ")[1].split()
    assert main([*command[1:], "--quiet", "--no-plots"]) == 0
    assert main(["eval", str(run), "--quiet"]) == 0
    np.testing.assert_array_equal(_summary_values(run)[0], _summary_values(trained)[0])


# ----------------------------------------------------------------------------- one writer


def test_eval_is_refused_while_another_process_writes_the_run(trained, tmp_path, capsys):
    run = _copy(trained, tmp_path)
    with writer_lock.locked(run, "fhc-jax train --resume --out " + str(run)):
        assert main(["eval", str(run)]) == 1
    err = capsys.readouterr().err
    assert "is in use by process" in err and "fhc-jax train --resume" in err
    assert not (run / "eval").exists()
    assert main(["eval", str(run), "--quiet"]) == 0  # released: it runs


# ----------------------------------------------------------------------------- Monte-Carlo


@struct.dataclass
class LaneState:
    lane: jax.Array
    time: jax.Array


@struct.dataclass
class LaneParams:
    alpha: jax.Array
    slip: jax.Array


class Lanes(Environment):
    """tests/toy_env.py's two lanes with slipping moves and without a declared exact model (so
    judged by Monte-Carlo): action a moves to lane a unless the move slips (probability
    ``slip``); the fast lane pays 1 and costs 1 per stage, the safe lane pays 0.5."""

    def __init__(self, horizon: int = 3, alpha: float = 1.0, slip: float = 0.2):
        if horizon < 1 or alpha < 0 or not 0 <= slip <= 1:
            raise ValueError(f"Lanes: horizon >= 1, alpha >= 0 and slip in [0, 1], found {horizon}, {alpha}, {slip}")
        self._horizon, self._alpha, self._slip = horizon, alpha, slip

    horizon = property(lambda self: self._horizon)
    num_actions = property(lambda self: 2)
    num_constraints = property(lambda self: 1)
    observation_shape = property(lambda self: (1,))
    observation_dtype = property(lambda self: jnp.float32)
    default_params = property(
        lambda self: LaneParams(
            alpha=jnp.asarray([self._alpha], jnp.float32), slip=jnp.asarray(self._slip, jnp.float32)
        )
    )

    def _static_config(self) -> tuple:
        return (self._horizon, self._alpha, self._slip)

    def observation(self, state, params):
        return state.lane.astype(jnp.float32)[None]

    def thresholds(self, params):
        return params.alpha

    def reset(self, key, params):
        state = LaneState(lane=jnp.zeros((), jnp.int32), time=jnp.zeros((), jnp.int32))
        return self.observation(state, params), state

    def noise(self, key, params):
        return jax.random.uniform(key, (), jnp.float32)

    def transition(self, noise, state, action, params):
        lane = jnp.where(noise >= params.slip, jnp.asarray(action, jnp.int32), state.lane)
        nxt = LaneState(lane=lane, time=state.time + 1)
        fast = (lane == 1).astype(jnp.float32)
        return self.observation(nxt, params), nxt, 0.5 + 0.5 * fast, fast[None], nxt.time == self._horizon, {}


def test_monte_carlo_judgement_of_a_run_agrees_with_the_exact_one(trained):
    """The Monte-Carlo branch of evaluate_run (taken where there is no tabular exact model) on the
    tiny gridworld's policies: 95% intervals that contain the exact values, feasibility judged
    on the upper end of the cost interval."""
    run = load_run(trained)
    reward, costs = _summary_values(trained)
    target = dataclasses.replace(evaluation.target_environment(run), exact=False, episodes=4000)
    ev = evaluation.evaluate_run(run, target)
    j = ev.judgement
    assert j.method == "monte-carlo (4000 episodes)" and ev.record["episodes"] == 4000
    for r, row in enumerate(ev.record["seeds"]):
        # 95% intervals, widened to 99.9% so that the test fails by chance once in a thousand runs per value
        wide = 3.29 / 1.96
        assert abs(row["exact_reward"] - reward[r]) <= wide * j.reward_half_width[r]
        assert abs(row["exact_costs"][0] - costs[r, 0]) <= wide * j.cost_half_width[r, 0]
        assert row["costs_ci95"][0] == pytest.approx(
            [j.costs[r, 0] - j.cost_half_width[r, 0], j.costs[r, 0] + j.cost_half_width[r, 0]]
        )
        assert row["feasible"] == (j.costs[r, 0] + j.cost_half_width[r, 0] <= 3.0 * 1.02 + 1e-9)
    assert "± " in evaluation.format_evaluation(ev) and "upper end of the 95% interval" in evaluation.format_evaluation(
        ev
    )


@pytest.fixture(scope="module")
def lanes_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "lanes"
    assert (
        main(
            [
                "train",
                "--env",
                "test_evaluation:Lanes",
                "--algo",
                "fh-constrained",
                "--seeds",
                "2",
                "--set",
                "num_iterations=4",
                "--set",
                "episodes_per_iteration=16",
                "--set",
                "eval_episodes=32",
                "--set",
                "run.eval_episodes=400",
                "--out",
                str(out),
                "--quiet",
                "--no-plots",
            ]
        )
        == 0
    )
    return out


@pytest.mark.slow  # trains a sampled-path learner: about a minute on 2 CPU cores
def test_an_environment_without_an_exact_model_is_judged_by_monte_carlo(lanes_run, capsys):
    summary = json.loads((lanes_run / "summary.json").read_text())
    assert summary["aggregate"]["judged_by"] == "monte-carlo (400 episodes)"
    assert main(["eval", str(lanes_run)]) == 0
    out = capsys.readouterr().out
    assert "mean reward" in out and " ± " in out and "monte-carlo (400 episodes)" in out
    record = json.loads((lanes_run / "eval" / "trained.json").read_text())
    assert record["judged_by"] == "monte-carlo (400 episodes)" and record["episodes"] == 400
    for row, srow in zip(record["seeds"], summary["seeds"]):  # the same episodes as training's judgement
        assert row["exact_reward"] == pytest.approx(srow["exact_reward"], abs=1e-9)
        assert row["reward_ci95"] == pytest.approx(srow["reward_ci95"], abs=1e-9)
        lo, hi = row["costs_ci95"][0]
        assert lo <= row["exact_costs"][0] <= hi and row["feasible"] == (hi <= 1.0 * 1.02 + 1e-9)

    # a changed slip: the same policies in the changed environment, with wider intervals for
    # fewer episodes, agreeing with an independent Monte-Carlo estimate
    assert main(["eval", str(lanes_run), "--set", "env.slip=0.6", "--episodes", "300", "--quiet"]) == 0
    changed = json.loads((lanes_run / "eval" / "slip=0.6_episodes=300.json").read_text())
    assert changed["judged_by"] == "monte-carlo (300 episodes)" and changed["changes"] == {"slip": 0.6}
    run = load_run(lanes_run)
    env, params = config.make_env("test_evaluation:Lanes", {"slip": 0.6})
    mc = judge.monte_carlo(env, params, [run.policy(r) for r in range(2)], 300)
    for r, row in enumerate(changed["seeds"]):
        assert row["exact_reward"] == pytest.approx(float(mc["reward"][r]), abs=1e-9)
        assert row["exact_costs"] == pytest.approx(mc["costs"][r].tolist(), abs=1e-9)
        assert row["exact_reward"] != pytest.approx(record["seeds"][r]["exact_reward"], abs=1e-6)
        assert (
            row["reward_ci95"][1] - row["exact_reward"]
            > record["seeds"][r]["reward_ci95"][1] - record["seeds"][r]["exact_reward"]
        )  # 300 episodes, not 400
    # a horizon change is refused for policies over stages
    assert main(["eval", str(lanes_run), "--set", "env.horizon=5"]) == 2
    assert "has horizon 5, the policies act over 3 stages" in capsys.readouterr().err
