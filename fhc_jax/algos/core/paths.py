"""Which path a learner takes on an environment: the *tabular path* (rollouts from the exact
tabular model, policies tabulated over every (stage, state), judged exactly) where the
environment has a tabular exact model, the *sampled path* (episodes through
:func:`fhc_jax.rollout`, networks or features applied to the recorded observations, judged by
Monte-Carlo) everywhere else or when asked for; and which input a network reads there.
"""

from __future__ import annotations


def judged_exactly(env) -> bool:
    """Whether a learner's policy on ``env`` is judged exactly (a tabular exact model: policy
    tables and ``fhc_jax.evaluate``) rather than by Monte-Carlo rollouts."""
    return env.is_tabular and env.has_exact_model


ENV_OBSERVATIONS = ("env", "env_t")


def resolve_observation(env, path: str, observation: str, tabular: str = "xy") -> str:
    """``Config.observation = "auto"`` resolved on ``env``: ``tabular`` (a learner's choice of
    encoder: "xy", the paper's Env 1, by default) on the tabular path of an environment that
    supports it, the environment's own observation "env" everywhere else (the sampled path, box
    actions, environments without that encoder); any other value is returned unchanged (and
    validated by the learner)."""
    if observation != "auto":
        return observation
    on_table = path != "sampled" and judged_exactly(env)
    return tabular if on_table and tabular in env.supported_observations else "env"


def takes_sampled_path(name: str, env, path: str) -> bool:
    """Whether a learner ``name`` with ``Config.path`` takes the sampled path on ``env``
    ("auto": where ``env`` has no tabular exact model).

    Raises:
        ValueError: ``path="tabular"`` without a tabular exact model.
    """
    if path == "tabular" and not judged_exactly(env):
        raise ValueError(
            f"{name}: Config.path = 'tabular' needs a tabular exact model, which "
            f"{env.name} does not declare (use path = 'auto' or 'sampled')"
        )
    return path == "sampled" or (path == "auto" and not judged_exactly(env))


def resolve_path(name: str, env, path: str, observation: str) -> bool:
    """Whether a learner ``name`` with ``Config.path`` and ``Config.observation`` takes the
    sampled path on ``env`` ("auto": where ``env`` has no tabular exact model).

    Raises:
        ValueError: ``path="tabular"`` without a tabular exact model; on the sampled path an
            observation other than "env" / "env_t"; non-flat environment observations.
    """
    sampled = takes_sampled_path(name, env, path)
    if sampled and observation not in ENV_OBSERVATIONS:
        raise ValueError(
            f"{name}: Config.observation must be one of 'env', 'env_t' for {env.name} "
            f"on the sampled path, found {observation!r}"
        )
    if (sampled or observation in ENV_OBSERVATIONS) and len(env.observation_shape) != 1:
        raise ValueError(
            f"{name}: Config.observation = {observation!r}: the networks take flat observations, but "
            f"{env.name}'s have shape {tuple(env.observation_shape)}; flatten them in the "
            "environment"
        )
    return sampled
