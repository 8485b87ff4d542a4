"""fhc_jax.experiment: typed config loading, the chunked runner, checkpoints, registry."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import fhc_jax as fhc
from fhc_jax.algos import fh_constrained as fc
from fhc_jax.algos import resolve_env_defaults
from fhc_jax.experiment import checkpoint, config, runner, sweep
from fhc_jax.experiment.typed_settings import ConfigError

TINY = ["env.size=3", "env.horizon=4", "num_iterations=20", "episodes_per_iteration=8", "run.chunk_size=5"]


def test_registry_names_and_errors():
    assert config.canonical_name("ppo_lagrangian") == "ppo-lag"
    assert config.load_algorithm("fh-constrained") is fc
    assert config.available_algorithms() == ["fh-constrained", "nn-constrained", "ppo-lag", "cpo", "e-cop", "saute-lag"]
    assert config.ALGORITHMS["ppo-lag"] == "ppo_lagrangian"
    for module in config.LEARNERS.values():
        for tabular in (True, False):
            assert resolve_env_defaults(module.Config(), tabular).num_iterations >= 1
        assert callable(module.make_learner) and callable(module.make_train)
    with pytest.raises(ValueError, match="unknown algorithm 'sac'.*fh-constrained"):
        config.load_algorithm("sac")


def test_toml_and_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        'num_iterations = 12\nvariant = "paper"\n[critic_lr]\ninit = 0.5\n'
        '[env]\nname = "gridworld"\nsize = 4\nalpha = [3.0]\n[run]\nseeds = 2\n'
        "feasibility_tolerance = 0.0\n"
    )
    spec = config.load_spec("fh-constrained", config_file=path, overrides=["env.horizon=5", "trace=1"])
    assert spec.env_name == "gridworld" and spec.env["size"] == 4 and spec.env["horizon"] == 5 and spec.seeds == 2
    assert spec.feasibility_tolerance == 0.0 and spec.settings()["env.name"] == "gridworld"
    assert spec.learner.critic_lr.init == 0.5 and spec.learner.variant == "paper"
    assert spec.learner.trace == 1.0 and isinstance(spec.learner.trace, float)
    assert spec.chunk_size == 12  # min(eval_every, num_iterations)
    assert config.load_spec(settings=spec.settings()) == spec  # config.json round trip
    feats = config.load_spec(overrides=["features.kind=tile_coding", "features.tiles=2"]).learner.features
    assert feats == fc.feat.TileCoding(tiles=2)


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "critc_step.init=1",
            r"unknown key 'critc_step.init' \(did you mean 'critic_lr.init'\?\).*valid keys: .*actor_lr.decay",
        ),
        ("env.sise=4", r"unknown key 'env.sise'.*env.size"),
        ("run.seeds=0", r"run.seeds must be an integer >= 1, found 0"),
        ("run.feasibility_tolerance=-0.1", r"run.feasibility_tolerance must be a number >= 0, found -0.1"),
        ("env.name=nowhere", r"unknown environment 'nowhere'; registered: gridworld"),
        ("critic_lr.power=0.3", r"critic_lr.power must lie in \(0.5, 1\]"),
        ("critic_lr.init=abc", r"critic_lr.init must be a number, found 'abc' \(str\)"),
        ("num_iterations=2.5", r"num_iterations must be an integer, found 2.5"),
        ("env.size=1", r"size must be an integer >= 2, found 1"),
        ("env.slip=1.5", r"slip"),
        ("trace=2", r"trace must lie in \[0, 1\]"),
        ("features.kind=fourier", r"features.kind must be one of"),
        ("noequals", r"--set expects key=value"),
    ],
)
def test_config_errors(override, message):
    with pytest.raises(ValueError, match=message):
        config.load_spec("fh-constrained", overrides=[override])


def test_obs_only_for_network_learners():
    with pytest.raises(ValueError, match="--obs does not apply to 'fh-constrained'"):
        config.load_spec("fh-constrained", observation="xyt")


@pytest.mark.slow
def test_chunked_equals_make_train():
    """Chunks of a lax.scan end exactly where one monolithic scan ends (same step, same keys)."""
    env = fhc.GridWorld(3, 4)
    cfg = fc.Config(num_iterations=12, episodes_per_iteration=8, eval_every=4)
    res = runner.train_seeds(fc, env, env.default_params, cfg, 2, chunk_size=4)
    out = jax.jit(jax.vmap(fc.make_train(env, env.default_params, cfg)))(runner.seed_keys(0, 2))
    np.testing.assert_array_equal(res.final_state.theta, np.asarray(out.state.theta))
    np.testing.assert_array_equal(res.state.metrics["multipliers"], np.asarray(out.metrics.multipliers))
    np.testing.assert_array_equal(res.state.exact_iterations, np.asarray(out.metrics.evaluation.iteration)[0])
    np.testing.assert_array_equal(res.state.exact_reward, np.asarray(out.metrics.evaluation.reward))
    assert res.policy.shape == (2, 4, 9, 9)


@pytest.mark.slow
def test_checkpoint_resume_bit_identical(tmp_path):
    """4 chunks in one go == 2 chunks, checkpoint, fresh trainer, restore, 2 more chunks."""
    spec = config.load_spec("fh-constrained", overrides=TINY, seeds=2)
    env, params = spec.make_env()
    keys = runner.seed_keys(spec.seed, spec.seeds)
    trainer = runner.ChunkedTrainer(fc.make_learner(env, params, spec.learner), 2, spec.chunk_size)
    full = trainer.run(trainer.init(keys))
    half = trainer.run(trainer.init(keys), max_chunks=2)
    checkpoint.save(tmp_path / "ckpt", trainer, half)
    assert checkpoint.latest_iteration(tmp_path / "ckpt") == 10
    fresh = runner.ChunkedTrainer(fc.make_learner(env, params, spec.learner), 2, spec.chunk_size)
    restored = checkpoint.restore(tmp_path / "ckpt", fresh, fresh.init(keys))
    assert restored.iteration == 10
    resumed = fresh.run(restored)
    a, b = trainer.host_carry(full.carry), fresh.host_carry(resumed.carry)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)
    for k in full.metrics:
        np.testing.assert_array_equal(full.metrics[k], resumed.metrics[k])
    np.testing.assert_array_equal(full.exact_costs, resumed.exact_costs)


def test_sweep_grid_validation():
    spec = config.load_spec("fh-constrained", overrides=TINY, seeds=1)
    assert sweep.parse_grid(["trace=0.2,0.5", "critic_lr.init=1"]) == {"trace": [0.2, 0.5], "critic_lr.init": [1]}
    with pytest.raises(ValueError, match="only numeric hyperparameters"):
        sweep.grid_specs(spec, {"episodes_per_iteration": [4, 8]})
    with pytest.raises(ValueError, match="only numeric hyperparameters"):
        sweep.grid_specs(spec, {"env.size": [3, 4]})
    with pytest.raises(ValueError, match="trace must lie in"):
        sweep.grid_specs(spec, {"trace": [0.5, 3.0]})
    with pytest.raises(ValueError, match="--grid expects"):
        sweep.parse_grid(["trace"])
    assert len(sweep.grid_specs(spec, {"trace": [0.2, 0.5], "critic_lr.init": [0.5, 1.0]})) == 4


def test_coarse_map_settings_round_trip_and_switch_kinds():
    """A coarse map's ``stage_inputs`` is written to config.json and read back; a switch of
    ``features.kind`` keeps the option both kinds have."""
    from fhc_jax.algos.core import features

    spec = config.load_spec(
        "fh-constrained",
        env="battery",
        overrides=["features.kind=radial_basis", "features.num_centers=5", "features.stage_inputs=false"],
    )
    assert spec.learner.features == features.RadialBasis(5, stage_inputs=False)
    settings = spec.settings()
    assert settings["features.stage_inputs"] is False
    assert config.load_spec(settings=settings) == spec  # config.json round trip
    switched = config.load_spec(
        "fh-constrained", env="battery", overrides=["features.kind=tile_coding", "features.tiles=6"]
    ).learner.features
    assert switched == features.TileCoding(tiles=6, stage_inputs=False)  # from Auto()'s stage_inputs
    assert (
        config.load_spec(
            "fh-constrained", env="battery", overrides=["features.stage_inputs=true", "features.kind=tile_coding"]
        ).learner.features
        == features.TileCoding()
    )
    with pytest.raises(ConfigError, match="features.stage_inputs"):
        config.load_spec("fh-constrained", env="battery", overrides=["features.stage_inputs=maybe"])
