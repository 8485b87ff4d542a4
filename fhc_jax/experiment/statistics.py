"""Statistics over seeds: means and interquartile means with stratified-bootstrap 95% intervals,
the probability of violating the constraint with a Wilson 95% interval, the optimality gap, and
performance profiles (Agarwal et al., "Deep RL at the edge of the statistical precipice", 2021).

Every interval here is over the R seeds of one algorithm (or one sweep setting): it says how
much the reported number would move if the experiment were repeated with other seeds, and it
is always stated with its number of seeds (``n_seeds``; "(5 seeds)" in printed tables).

* **Mean and IQM** of the exact (or Monte-Carlo) reward, of each cost and of the optimality
  gap, with 95% **stratified-bootstrap** percentile intervals computed by
  ``rliable.library.get_interval_estimates`` (:func:`bootstrap`). The quantities are the columns
  ("tasks") of one (R, K) score matrix, so each is resampled over seeds independently (its own
  stratum). The IQM is the 25% trimmed mean of ``rliable.metrics.aggregate_iqm``
  (``scipy.stats.trim_mean(x, 0.25)``); inside the bootstrap both estimators run column-wise in
  numpy (:func:`column_means`, :func:`column_iqms`, equal to rliable's per column and tested
  so), which keeps 2,000 resamples well under a second. The bootstrap is reproducible: rliable
  draws its indices from numpy's global generator, which is seeded with ``seed`` for the call and
  restored afterwards. With one seed there is nothing to resample and the intervals are None.
  With few seeds the percentile bootstrap is too narrow: on a normal population its 95%
  intervals of the mean covered the true mean in 82% of 1,000 experiments at R = 5 seeds, 88% at
  R = 10 and 92.5% at R = 20 (its IQM intervals: 89%, 92%, 94%); read them at 5 seeds as a lower
  bound on the uncertainty.
* **Probability of violating the constraint**: the fraction of seeds that the judge
  (:mod:`fhc_jax.experiment.judge`, one tolerance) finds infeasible, with the Wilson score 95%
  interval (``scipy.stats.binomtest(...).proportion_ci(method="wilson")``;
  :func:`violation_probability`).
* **Optimality gap**: per seed J* - J against ``fhc_jax.solve``'s optimum (or the reference of a
  Monte-Carlo judgement), signed: the mean (and IQM) gap with its bootstrap interval, in reward
  units and relative to |J*|. This is the mean gap, not rliable's ``aggregate_optimality_gap``
  (which clips each score at the optimum): a seed above J* (possible only by breaking the
  constraint) lowers the mean gap here, and its violation shows in the violation probability.
* **Performance profiles** (:func:`performance_profiles`, :func:`plot_performance_profiles`):
  per algorithm the fraction of seeds whose fraction of the optimum J / J* exceeds tau, with
  stratified-bootstrap 95% bands (``rliable.library.create_performance_profile``, figure by
  ``rliable.plot_utils.plot_performance_profiles``), once over all seeds and once scoring the
  infeasible seeds 0.

rliable is imported lazily (it pulls in arch, pandas and statsmodels: seconds); where it cannot
be imported (:func:`unavailable` says why), the point estimates and the violation interval are
still reported and every bootstrap interval is None, with the reason in ``intervals``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from fhc_jax.experiment.judgement import Judgement

#: every interval of this module is a 95% interval
CONFIDENCE = 0.95
#: bootstrap resamples (``resamples``); each resample evaluates every algorithm's statistics at once
DEFAULT_RESAMPLES = 2000
#: seed of numpy's global generator during a bootstrap (reproducible intervals)
DEFAULT_SEED = 0
#: thresholds tau of the performance profiles (fraction of the optimum J / J*)
PROFILE_TAUS = np.round(np.linspace(0.0, 1.1, 111), 6)


# ----------------------------------------------------------------------------- rliable


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """None when rliable's bootstrap can be imported, else the reason (with the fix); checked
    once per process."""
    try:
        import rliable.library  # noqa: F401
    except Exception as err:  # noqa: BLE001 (ImportError, or a broken dependency such as arch on pandas 3)
        return (
            f"rliable's bootstrap cannot be imported ({type(err).__name__}: {err}); install the stats extra: "
            "pip install 'fhc_jax[stats]'"
        )
    return None


def _library():
    """``rliable.library``, or ImportError with :func:`unavailable`'s reason."""
    reason = unavailable()
    if reason is not None:
        raise ImportError(reason)
    from rliable import library

    return library


@contextlib.contextmanager
def _global_numpy_seed(seed: int) -> Iterator[None]:
    """numpy's global generator seeded with ``seed`` inside, restored afterwards (rliable's
    ``StratifiedBootstrap`` draws its indices with ``np.random.choice``)."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)


def _check_resamples(resamples: int, seed: int) -> None:
    if isinstance(resamples, bool) or not isinstance(resamples, (int, np.integer)) or resamples < 1:
        raise ValueError(f"statistics: resamples must be an integer >= 1, found {resamples!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
        raise ValueError(f"statistics: seed must be an integer in [0, 2**32), found {seed!r}")


# ----------------------------------------------------------------------------- estimators


def iqm(x: Any) -> float:
    """Interquartile mean of a (R,) array: the 25% trimmed mean (``scipy.stats.trim_mean(x,
    0.25)``, as ``rliable.metrics.aggregate_iqm``): the mean of the values left after cutting
    floor(R / 4) from each end."""
    x = np.asarray(x, np.float64).reshape(-1, 1)
    if x.size == 0:
        raise ValueError("statistics: iqm of an empty array")
    return float(column_iqms(x)[0])


def column_means(scores: np.ndarray) -> np.ndarray:
    """Mean of each column of an (R, K) matrix, (K,): ``rliable.metrics.aggregate_mean`` of each
    column as an (R, 1) matrix."""
    return np.mean(scores, axis=0)


def column_iqms(scores: np.ndarray) -> np.ndarray:
    """IQM of each column of an (R, K) matrix, (K,): ``rliable.metrics.aggregate_iqm`` of each
    column (``scipy.stats.trim_mean(column, 0.25)``), vectorised."""
    n = scores.shape[0]
    cut = int(0.25 * n)
    return np.mean(np.sort(scores, axis=0)[cut : n - cut], axis=0)


def bootstrap(scores: Any, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> dict[str, np.ndarray]:
    """Means and IQMs of the K columns of ``scores`` over R seeds with stratified-bootstrap 95%
    percentile intervals (``rliable.library.get_interval_estimates``; each column is one stratum,
    resampled over seeds on its own).

    Args:
        scores: (R, K) finite values (or (R,) for K = 1).
        resamples: bootstrap replications (>= 1).
        seed: numpy's global seed during the bootstrap (restored afterwards), in [0, 2**32).
    Returns:
        ``mean`` (K,), ``iqm`` (K,), ``mean_ci`` (2, K) and ``iqm_ci`` (2, K) (rows: lower,
        upper; NaN when R = 1).
    Raises:
        ValueError: an empty or non-finite ``scores``, bad ``resamples`` or ``seed``.
        ImportError: rliable cannot be imported (:func:`unavailable`).
    """
    _check_resamples(resamples, seed)
    x = np.asarray(scores, np.float64)
    x = x.reshape(-1, 1) if x.ndim == 1 else x
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"statistics: scores must be (R, K) with R, K >= 1, found shape {np.shape(scores)}")
    if not np.all(np.isfinite(x)):
        raise ValueError("statistics: scores must be finite (a diverged seed has no interval)")
    mean, q = column_means(x), column_iqms(x)
    if x.shape[0] == 1:
        nan = np.full((2, x.shape[1]), np.nan)
        return {"mean": mean, "iqm": q, "mean_ci": nan, "iqm_ci": nan.copy()}
    library = _library()

    k = x.shape[1]
    with _global_numpy_seed(int(seed)):
        _, ci = library.get_interval_estimates(
            {"scores": x},
            lambda s: np.concatenate([column_means(s), column_iqms(s)]),
            reps=int(resamples),
            confidence_interval_size=CONFIDENCE,
        )
    ci = np.asarray(ci["scores"], np.float64)
    return {"mean": mean, "iqm": q, "mean_ci": ci[:, :k], "iqm_ci": ci[:, k:]}


def wilson_interval(successes: int, trials: int) -> tuple[float, float]:
    """Wilson score 95% interval of a binomial proportion (``scipy.stats.binomtest``).

    Raises:
        ValueError: ``trials`` < 1 or ``successes`` outside [0, trials].
    """
    from scipy import stats

    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"statistics: need 0 <= successes <= trials and trials >= 1, found {successes}/{trials}")
    ci = stats.binomtest(int(successes), int(trials)).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return float(ci.low), float(ci.high)


def violation_probability(violating: Any) -> dict[str, Any]:
    """The probability of violating the constraint from R seeds' verdicts.

    Args:
        violating: (R,) bool, True where the judge finds the seed infeasible.
    Returns:
        ``violating_seeds``, ``n_seeds``, ``estimate`` (the fraction), ``ci95`` ([low, high],
        Wilson score) and ``method``.
    """
    v = np.asarray(violating, bool).reshape(-1)
    k, n = int(v.sum()), int(v.size)
    low, high = wilson_interval(k, n)
    return {"violating_seeds": k, "n_seeds": n, "estimate": k / n, "ci95": [low, high], "method": "wilson"}


# ----------------------------------------------------------------------------- one judgement


def _interval(ci: np.ndarray, j: int, scale: float = 1.0) -> list[float] | None:
    lo, hi = ci[0, j], ci[1, j]
    return None if not (np.isfinite(lo) and np.isfinite(hi)) else [float(lo * scale), float(hi * scale)]


def _block(values: np.ndarray, boot: dict[str, np.ndarray] | None, j: int, scale: float = 1.0) -> dict[str, Any]:
    """mean / iqm with their intervals of column j (None where not finite or not bootstrapped)."""
    n = int(values.shape[0])
    col = values[:, j]
    bad = int(np.sum(~np.isfinite(col)))
    if bad:
        return {"mean": None, "mean_ci95": None, "iqm": None, "iqm_ci95": None, "n_seeds": n, "non_finite_seeds": bad}
    out = {
        "mean": float(np.mean(col)) * scale,
        "mean_ci95": None,
        "iqm": iqm(col) * scale,
        "iqm_ci95": None,
        "n_seeds": n,
    }
    if boot is not None:
        out["mean_ci95"] = _interval(boot["mean_ci"], j, scale)
        out["iqm_ci95"] = _interval(boot["iqm_ci"], j, scale)
    return out


def seed_statistics(
    judged: Judgement, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED
) -> dict[str, Any]:
    """The statistics over the seeds of one judgement (module docstring).

    Args:
        judged: R seeds judged by :func:`fhc_jax.experiment.judge.judge`.
        resamples: bootstrap resamples (:func:`bootstrap`).
        seed: the bootstrap's seed.
    Returns:
        JSON-ready: ``n_seeds``; ``intervals`` (how they were computed, or why they are missing);
        ``reward`` and ``costs`` (a list, one per constraint) each with ``mean``, ``mean_ci95``,
        ``iqm``, ``iqm_ci95``, ``n_seeds``; ``violation_probability``
        (:func:`violation_probability`); ``optimality_gap`` (J* - J, the same fields, plus
        ``relative``: (J* - J) / |J*|), None without an optimum. A quantity with a non-finite
        seed (a diverged run) has None values and ``non_finite_seeds``.
    """
    _check_resamples(resamples, seed)
    reward = np.asarray(judged.reward, np.float64).reshape(-1, 1)
    costs = np.asarray(judged.costs, np.float64).reshape(reward.shape[0], -1)
    gap = judged.gap
    cols = [reward, costs] + ([] if gap is None else [np.asarray(gap, np.float64).reshape(-1, 1)])
    values = np.concatenate(cols, axis=1)  # (R, 1 + M [+ 1])
    n, m = values.shape[0], costs.shape[1]
    reason = unavailable() if n > 1 else None  # (the module-level name: tests replace it)
    boot = None
    if n > 1 and reason is None:
        finite = np.where(np.isfinite(values), values, 0.0)  # non-finite columns are reported as None
        boot = bootstrap(finite, resamples=resamples, seed=seed)
    intervals: dict[str, Any] = {
        "method": "stratified bootstrap over seeds, percentile (rliable.library.get_interval_estimates)",
        "confidence": CONFIDENCE,
        "resamples": int(resamples),
        "bootstrap_seed": int(seed),
        "iqm": "interquartile mean, the 25% trimmed mean (rliable.metrics.aggregate_iqm)",
        "violation": "fraction of seeds the judge finds infeasible; Wilson score interval",
        "optimality_gap": "J* - J per seed (signed), mean and IQM over seeds; relative: / |J*|",
    }
    if n == 1:
        intervals["unavailable"] = "one seed: no interval"
    elif reason is not None:
        intervals["unavailable"] = reason
    out: dict[str, Any] = {
        "n_seeds": n,
        "judged_by": judged.method,
        "intervals": intervals,
        "reward": _block(values, boot, 0),
        "costs": [_block(values, boot, 1 + k) for k in range(m)],
        "violation_probability": violation_probability(~np.asarray(judged.feasible, bool)),
        "optimality_gap": None,
    }
    if gap is not None:
        block = _block(values, boot, 1 + m)
        j_star = float(judged.optimum.reward)
        if j_star:
            block["relative"] = _block(values, boot, 1 + m, 1.0 / abs(j_star))
            block["relative"].pop("n_seeds")
        out["optimality_gap"] = block
    return out


# ----------------------------------------------------------------------------- printing


def _num(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def format_estimate(block: Mapping[str, Any] | None, kind: str = "mean", digits: int = 2) -> str:
    """``"44.55 [44.36, 44.70]"`` (``kind``: "mean" or "iqm"); "-" for a missing value, the
    point alone without an interval."""
    if block is None or block.get(kind) is None:
        return "-"
    ci = block.get(f"{kind}_ci95")
    text = _num(block[kind], digits)
    return text if ci is None else f"{text} [{_num(ci[0], digits)}, {_num(ci[1], digits)}]"


def format_violation(block: Mapping[str, Any]) -> str:
    """``"0.20 [0.04, 0.62]"``: the violation probability with its Wilson interval."""
    lo, hi = block["ci95"]
    return f"{block['estimate']:.2f} [{lo:.2f}, {hi:.2f}]"


def format_line(stats: Mapping[str, Any], digits: int = 2) -> str:
    """One line: mean and IQM reward, mean cost(s), violation probability and gap, each with its
    95% interval, and the number of seeds."""
    costs = " / ".join(format_estimate(c, "mean", digits) for c in stats["costs"])
    parts = [
        f"reward mean {format_estimate(stats['reward'], 'mean', digits)}",
        f"IQM {format_estimate(stats['reward'], 'iqm', digits)}",
        f"cost mean {costs}",
        f"P(violation) {format_violation(stats['violation_probability'])}",
    ]
    if stats.get("optimality_gap") is not None:
        parts.append(f"gap to optimum {format_estimate(stats['optimality_gap'], 'mean', digits)}")
    return ", ".join(parts) + f" ({stats['n_seeds']} seeds, 95% intervals)"


# ----------------------------------------------------------------------------- performance profiles


def profile_scores(judged: Judgement, feasible_only: bool = False) -> np.ndarray | None:
    """Fraction of the optimum per seed, (R,) (``Judgement.fraction_of_optimum``: J / J* for
    J* > 0, 1 - (J* - J) / |J*| for negative optima; infeasible seeds scored 0 when
    ``feasible_only``; non-finite seeds scored 0); None without a nonzero optimum."""
    frac = judged.fraction_of_optimum
    if frac is None:
        return None
    frac = np.asarray(frac, np.float64)
    frac = np.where(np.isfinite(frac), frac, 0.0)
    return np.where(judged.feasible, frac, 0.0) if feasible_only else frac


def profile_taus(scores: Mapping[str, Any]) -> np.ndarray:
    """:data:`PROFILE_TAUS` (0 to 1.1 in steps of 0.01), widened in steps of 0.1 to take in
    every finite score of ``scores`` (name -> (R,))."""
    values = np.concatenate([np.asarray(s, np.float64).reshape(-1) for s in scores.values()] or [np.zeros(0)])
    values = values[np.isfinite(values)]
    low = min(0.0, float(np.floor(values.min() * 10) / 10)) if values.size else 0.0
    high = max(1.1, float(np.ceil(values.max() * 10) / 10) + 0.1) if values.size else 1.1
    if low == 0.0 and high == 1.1:
        return PROFILE_TAUS
    return np.round(np.linspace(low, high, round((high - low) * 100) + 1), 6)


def performance_profiles(
    scores: Mapping[str, Any], taus: Any = PROFILE_TAUS, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Score distributions (fraction of seeds with score > tau) with stratified-bootstrap 95%
    bands (``rliable.library.create_performance_profile``).

    Args:
        scores: name -> (R,) scores of one algorithm (R may differ between names).
        taus: (T,) thresholds.
        resamples, seed: of the bootstrap.
    Returns:
        (profiles: name -> (T,), bands: name -> (2, T)).
    Raises:
        ValueError: no scores, an empty or non-finite score array, bad resamples/seed.
        ImportError: rliable cannot be imported.
    """
    _check_resamples(resamples, seed)
    if not scores:
        raise ValueError("statistics: performance_profiles needs at least one algorithm's scores")
    taus = np.asarray(taus, np.float64).reshape(-1)
    score_dict = {}
    for name, s in scores.items():
        s = np.asarray(s, np.float64).reshape(-1, 1)
        if s.size == 0 or not np.all(np.isfinite(s)):
            raise ValueError(f"statistics: scores of {name!r} must be a non-empty finite array")
        score_dict[name] = s
    library = _library()

    def fraction_above(s: np.ndarray, tau_list: np.ndarray) -> np.ndarray:  # rliable's run_score_deviation, vectorised
        return np.mean(s.reshape(-1)[:, None] > np.asarray(tau_list)[None, :], axis=0)

    with _global_numpy_seed(int(seed)):
        profiles, bands = library.create_performance_profile(
            score_dict,
            taus,
            custom_profile_func=fraction_above,
            reps=int(resamples),
            confidence_interval_size=CONFIDENCE,
        )
    return (
        {k: np.asarray(v, np.float64) for k, v in profiles.items()},
        {k: np.asarray(v, np.float64) for k, v in bands.items()},
    )


def plot_performance_profiles(
    panels: Sequence[tuple[str, Mapping[str, Any]]],
    path: str | Path,
    *,
    seeds: int,
    colors: Mapping[str, Any] | None = None,
    title: str = "",
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Path:
    """A figure with one performance-profile panel per (title, name -> (R,) scores), drawn with
    ``rliable.plot_utils.plot_performance_profiles`` (95% stratified-bootstrap bands), written
    atomically as PNG to ``path``.

    Raises:
        ValueError / ImportError: as :func:`performance_profiles`.
    """
    from rliable import plot_utils

    from fhc_jax.experiment.plots import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 4.4), squeeze=False)
    for ax, (panel_title, scores) in zip(axes[0], panels):
        taus = profile_taus(scores)
        profiles, bands = performance_profiles(scores, taus, resamples=resamples, seed=seed)
        plot_utils.plot_performance_profiles(
            profiles,
            taus,
            performance_profile_cis=bands,
            ax=ax,
            colors=None if colors is None else {k: colors.get(k, "C7") for k in profiles},
            xlabel=r"fraction of the optimum $J/J^*$ ($\tau$)",
            ylabel=r"fraction of seeds with $J/J^* > \tau$",
            labelsize="medium",
            ticklabelsize="small",
        )
        ax.axvline(1.0, color="black", ls="--", lw=0.8)
        ax.set_xlim(float(taus[0]), float(taus[-1]))
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(panel_title, fontsize=9)
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(
        (title + ": " if title else "") + f"performance profiles over {seeds} seeds (95% stratified-bootstrap bands)",
        fontsize=9,
    )
    return save_figure(fig, path, dpi=120)
