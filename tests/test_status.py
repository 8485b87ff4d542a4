"""The run's status (:class:`fhc_jax.algos.core.selection.Status`): whether the returned policy met
the constraints, whether the multiplier settled, and the one line that says what is not yet so
and which of the learner's own settings to change."""

from __future__ import annotations

import numpy as np


def test_status_flags_a_trending_multiplier_and_a_cost_above_alpha():
    """:func:`~fhc_jax.algos.core.selection.constraint_status` on hand-made traces: a multiplier that
    doubles over the last tenth is trending (fitted over the last three tenths), a flat one and one
    rising 5% per tenth are not; a cost above alpha + d/50 over the
    last tenth is flagged; :func:`describe_status` words each case in one line."""
    from fhc_jax.algos.core.selection import constraint_status, describe_status

    n = 100
    flat = np.full((n, 1), 2.0)
    rising = np.linspace(1.0, 2.0, n)[:, None]  # +0.1 over the last tenth, level ~1.95: 5%
    steep = np.concatenate([np.ones(90), np.linspace(1.0, 2.0, 10)])[:, None]
    costs_ok = np.full((n, 1), 24.0)
    costs_high = np.full((n, 1), 26.0)
    alpha, units, nu_unit = np.array([25.0]), np.array([25.0]), np.array([1.0])
    ok = constraint_status(flat, costs_ok, alpha, units, nu_unit, True)
    assert bool(ok.ok) and describe_status(ok, alpha) is None
    assert not bool(constraint_status(rising, costs_ok, alpha, units, nu_unit, True).trending[0])
    st = constraint_status(steep, costs_ok, alpha, units, nu_unit, True)
    assert bool(st.trending[0]) and not bool(st.settled)
    line = describe_status(st, alpha, [2.0], label="seed 0")
    assert line.startswith("multiplier not yet settled: seed 0: multiplier still rising") and "\n" not in line
    high = constraint_status(flat, costs_high, alpha, units, nu_unit, False)
    assert bool(high.above[0]) and not bool(high.ok)
    line = describe_status(high, alpha)
    assert line.startswith("constraint not yet met: mean episode cost 26 > alpha 25")
    assert "the returned policy is above alpha" in line and "multiplier_max" in line


def test_status_advice_names_only_the_settings_the_learner_has():
    """The advice of a run that will not settle names the fields of the learner's own Config
    (:func:`~fhc_jax.algos.core.selection.multiplier_settings`): e-COP's step is its damping
    factor under eq. (7) and ``multiplier_step`` under the geometric law, FH-Constrained's its
    ``multiplier_lr``, PPO-Lagrangian's ``pid_ki`` under the PID law; CPO keeps no multiplier,
    so none is named; every name the advice gives is a field of that Config."""
    import dataclasses
    import re

    from fhc_jax.algos import cpo, ecop, fh_constrained, ppo_lagrangian
    from fhc_jax.algos.core.selection import constraint_status, describe_status, multiplier_settings

    n = 100
    steep = np.concatenate([np.ones(90), np.linspace(1.0, 2.0, 10)])[:, None]
    costs_high = np.full((n, 1), 26.0)
    alpha, units, nu_unit = np.array([25.0]), np.array([25.0]), np.array([1.0])
    known = (
        "multiplier_lr",
        "multiplier_step",
        "pid_ki",
        "pid_kp",
        "damping",
        "multiplier_max",
        "multiplier_gain",
        "multiplier_relative_gain",
    )
    cases = {
        "ecop paper": (ecop.Config(multiplier_method="paper"), {"damping"}),
        "ecop geometric": (ecop.Config(multiplier_method="geometric"), {"multiplier_step"}),
        "fh": (fh_constrained.Config(), {"multiplier_lr"}),
        "ppo pid": (ppo_lagrangian.Config(multiplier_method="pid"), {"pid_ki"}),
        "cpo": (cpo.Config(), set()),
    }
    for what, (cfg, steps) in cases.items():
        settings = multiplier_settings(cfg)
        assert set(dict(settings)["step"]) == steps, what
        fields = {f.name for f in dataclasses.fields(cfg)}
        for trace, costs, met in ((steep, costs_high, False), (steep, np.full((n, 1), 24.0), True)):
            line = describe_status(constraint_status(trace, costs, alpha, units, nu_unit, met, None, settings))
            if line is None:  # CPO keeps no multiplier: a met run whose cost is within alpha is ok
                assert what == "cpo" and met, what
                continue
            named = set(re.findall(r"[a-z_]+", line)) & set(known)
            assert named <= fields, (what, named - fields, line)
            assert steps <= named or not met, (what, line)
    cpo_line = describe_status(
        constraint_status(
            np.ones((n, 1)), costs_high, alpha, units, nu_unit, False, None, multiplier_settings(cpo.Config())
        )
    )
    assert "settled above alpha" in cpo_line and "multiplier_max" not in cpo_line


def test_a_multiplier_holding_the_cost_at_alpha_is_settled_however_it_wanders():
    """A multiplier still moving while the batch cost over the last tenth sits within d / 50 of
    alpha (d the violation unit) holds the cost where the law aims: settled (its wander is the
    batch's noise passing through the law). The same trend with the cost below that band (the
    multiplier still falling toward a cheaper level) or above it is not."""
    from fhc_jax.algos.core.selection import constraint_status

    n = 100
    steep = np.concatenate([np.ones(70), np.linspace(1.0, 3.0, 30)])[:, None]
    alpha, units, nu_unit = np.array([25.0]), np.array([25.0]), np.array([1.0])  # band: 25 +- 0.5
    for cost, trending in ((25.0, False), (25.45, False), (24.55, False), (24.4, True), (25.6, True)):
        st = constraint_status(steep, np.full((n, 1), cost), alpha, units, nu_unit, True)
        assert bool(st.trending[0]) == trending, cost
        assert bool(st.ok) == (not trending), cost
    assert bool(constraint_status(steep, np.full((n, 1), 25.6), alpha, units, nu_unit, True).above[0])


def test_a_learner_without_a_multiplier_is_judged_on_its_cost():
    """CPO's nu* is each update's dual, solved afresh from the batch: it is not judged for a
    trend (it swings between 0 and the recovery step's value by nature); CPO's run is settled
    when its cost over the last tenth is within alpha and unsettled when it is above. A learner
    that keeps a multiplier is judged on both."""
    from fhc_jax.algos import cpo, ppo_lagrangian
    from fhc_jax.algos.core.selection import constraint_status, multiplier_settings

    n = 100
    rising = np.concatenate([np.ones(70), np.linspace(1.0, 60.0, 30)])
    swinging = np.where(np.arange(n) % 3 == 0, 0.0, rising)[:, None]  # a dual that is 0 where inactive
    alpha, units, nu_unit = np.array([25.0]), np.array([25.0]), np.array([1.0])
    within, above = np.full((n, 1), 24.0), np.full((n, 1), 26.0)

    def status(cfg, costs):
        return constraint_status(swinging, costs, alpha, units, nu_unit, True, None, multiplier_settings(cfg))

    assert bool(status(cpo.Config(), within).ok) and not bool(np.any(status(cpo.Config(), within).trending))
    assert not bool(status(cpo.Config(), above).settled)
    ppo = status(ppo_lagrangian.Config(multiplier_method="pid"), within)
    assert bool(np.all(ppo.trending)) and not bool(ppo.ok)
