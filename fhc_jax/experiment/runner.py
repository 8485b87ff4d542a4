"""Chunked training: ONE driver that ``fhc-jax train``, ``sweep``, ``compare`` and ``eval`` share.

A learner's iterations run in compiled chunks of ``chunk_size`` updates, vmapped over runs
(seeds, or hyperparameter configurations x seeds), with exact evaluation, progress, tracking and
checkpoints between chunks. A chunk is ``jax.jit(jax.vmap(chunk))`` where ``chunk`` is a
``lax.scan`` of ``learner.step`` for ``chunk_size`` iterations followed by ``learner.evaluate``
of the result (:class:`fhc_jax.algos.core.scaffold.Learner`). The host sees the carry and the metrics
only between chunks. The runs axis is sharded over all devices (``jax.sharding``: a one-axis
``Mesh`` named ``"runs"``, padded to a multiple of the device count), so the same code uses one
CPU, several GPUs, or several processes and hosts.

**Several processes** (docs/distributed.md). After
:func:`~fhc_jax.experiment.distributed.initialize` (``jax.distributed``) ``jax.devices()`` is
the global device list: the mesh spans every process, each process builds and steps only its
addressable shard of the runs (``jax.make_array_from_callback`` of the same global inputs),
inside the same compiled program, and host-side reads gather the shards
(:func:`~fhc_jax.experiment.distributed.to_host`); :mod:`fhc_jax.experiment.distributed` holds
the rest (who writes, agreeing on failures, the runtime's verdict on a lost process).

:class:`ChunkedTrainer` holds the compiled programs of one learner for R runs;
:meth:`ChunkedTrainer.drive` is the driver: it starts the runs (from their keys, or restored
from a checkpoint), prints the progress line (:class:`~fhc_jax.experiment.progress.Progress`),
feeds the trackers and the caller's hook after every chunk, and stops at N updates, after
``max_chunks`` chunks, or after a chunk in which a run diverged. :func:`train_seeds` is its
one-call form (one learner, R seeds -> :class:`RunResult`).

**Divergence detection.** Every compiled chunk also returns a few reductions computed on the
device, per run: for each metric the index of its first non-finite iteration in the chunk (-1
if none), and for each floating-point leaf of the train state and for the exact evaluation
whether it is entirely finite (no host callbacks; the cost is one pass over the parameters per
chunk). :meth:`ChunkedTrainer.advance` turns them into a :class:`Divergence`; the runs that
stayed finite keep their (finite) results.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from fhc_jax.algos.core.evaluation import evaluation_iterations
from fhc_jax.algos.core.paths import judged_exactly
from fhc_jax.algos.core.selection import Status, constraint_status, multiplier_settings
from fhc_jax.experiment.config import MAX_SEED
from fhc_jax.experiment.distributed import is_key, to_host
from fhc_jax.experiment.divergence import Divergence, chunk_health, float_leaves
from fhc_jax.experiment.progress import Progress, env_steps_per_iteration

if TYPE_CHECKING:
    from fhc_jax.algos.core.scaffold import Learner
    from fhc_jax.experiment.tracking import Trackers

Array = jax.Array

RUNS_AXIS = "runs"


def seed_keys(seed: int, num_seeds: int) -> Array:
    """Keys of seeds 0..R-1: ``fold_in(key(seed), i)``, so seed i's run does not depend on R.
    Typed key array, (R,).

    Raises:
        ValueError: ``seed`` outside [0, 2**32 - 1] (``jax.random.key`` keeps 32 bits: seeds s
            and s + 2**32 would be the same runs), or ``num_seeds`` < 1.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an integer in [0, {MAX_SEED}] (jax.random.key keeps 32 bits), found {seed!r}")
    if isinstance(num_seeds, bool) or not isinstance(num_seeds, (int, np.integer)) or num_seeds < 1:
        raise ValueError(f"num_seeds must be an integer >= 1, found {num_seeds!r}")
    base = jax.random.key(int(seed))
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(num_seeds, dtype=jnp.uint32))


def _put(x: np.ndarray, sharding: NamedSharding | None) -> Array:
    """A global numpy array (identical on every process) as a device array sharded along axis 0."""
    if sharding is None:
        return jnp.asarray(x)
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


@dataclasses.dataclass
class ChunkState:
    """Where a chunked run stands (between chunks).

    Attributes (R runs, n iterations done, E = exact evaluations so far, M constraints):
        carry: the learner's :class:`~fhc_jax.algos.core.scaffold.Carry` with a leading runs axis
            (padded to a multiple of the device count; device arrays).
        iteration: n, updates done.
        metrics: per-iteration metrics, name -> (R, n, ...) numpy arrays.
        exact_iterations: iterations at which the policy was evaluated exactly, (E,) int.
        exact_reward: exact J of each run's policy there, (R, E).
        exact_costs: exact S^(k), (R, E, M).
        elapsed_s: seconds spent in chunks so far (compilation excluded).
        divergence: None, or the :class:`Divergence` of the runs that became non-finite.
    """

    carry: Any
    iteration: int
    metrics: dict[str, np.ndarray]
    exact_iterations: np.ndarray
    exact_reward: np.ndarray
    exact_costs: np.ndarray
    elapsed_s: float = 0.0
    divergence: Divergence | None = None


class ChunkedTrainer:
    """Compiled chunk programs of one learner for R runs.

    Args:
        learner: :class:`fhc_jax.algos.core.scaffold.Learner`.
        num_runs: R.
        chunk_size: iterations per chunk (>= 1); the last chunk is shorter when it does not
            divide ``num_iterations`` (one more compilation).
        num_iterations: total updates N (default ``learner.config.num_iterations``).
        hparams: None (every run uses ``learner.config``, baked into the program exactly as
            ``make_train`` does) or a stacked config with leading axis R
            (:func:`fhc_jax.algos.stack`): one configuration per run.
        shard: split the runs axis over all devices (padding it to a multiple of their count).
    """

    def __init__(
        self,
        learner: Learner,
        num_runs: int,
        chunk_size: int,
        *,
        num_iterations: int | None = None,
        hparams: Any | None = None,
        shard: bool = True,
    ):
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be an integer >= 1, found {chunk_size}")
        self.learner = learner
        self.num_runs = int(num_runs)
        self.chunk_size = int(chunk_size)
        self.num_iterations = int(learner.config.num_iterations if num_iterations is None else num_iterations)
        mesh = Mesh(np.asarray(jax.devices()), (RUNS_AXIS,))  # every input and output is split along "runs"
        self.sharding = NamedSharding(mesh, PartitionSpec(RUNS_AXIS)) if shard else None
        ndev = len(jax.devices()) if shard else 1
        self.padded_runs = -(-self.num_runs // ndev) * ndev
        self.batched = hparams is not None
        self.hparams = None
        if self.batched:
            hparams = learner.resolve(hparams, (self.num_runs,))  # once for the whole run
            leaves = jax.tree.leaves(hparams)
            if any(np.shape(x)[:1] != (self.num_runs,) for x in leaves):
                raise ValueError(f"hparams: every numeric leaf needs a leading axis of R = {self.num_runs} runs")
            self.hparams = jax.tree.map(lambda x: _put(self._pad(np.asarray(x)), self.sharding), hparams)
        self.compile_s = 0.0
        self._programs: dict[str, Any] = {}
        # make_train's evaluation marks (the candidates of the returned policy; chunks of
        # eval_every updates, the default chunk size, end on every one of them)
        self.marks = set(int(i) for i in evaluation_iterations(self.num_iterations, learner.config.eval_every)[1:])

    # ------------------------------------------------------------------ helpers
    def _pad(self, x: np.ndarray) -> np.ndarray:
        extra = self.padded_runs - x.shape[0]
        if extra == 0:
            return x
        return np.concatenate([x, np.repeat(x[-1:], extra, axis=0)], axis=0)

    def _compiled(self, name: str, fn: Callable, *args) -> Any:
        if name not in self._programs:
            t0 = time.perf_counter()
            # every input and output has a leading runs axis: shard all of them along it
            shardings = {} if self.sharding is None else {"in_shardings": self.sharding, "out_shardings": self.sharding}
            self._programs[name] = jax.jit(fn, **shardings).lower(*args).compile()
            self.compile_s += time.perf_counter() - t0
        return self._programs[name]

    def _args(self, *args):
        return args + ((self.hparams,) if self.batched else ())

    def _vmap(self, fn: Callable) -> Callable:
        """vmap ``fn(x, cfg)`` over runs, with cfg the per-run hparams or the constant config."""
        cfg = self.learner.config
        if self.batched:
            return jax.vmap(fn)
        return jax.vmap(lambda x: fn(x, cfg))

    def put_carry(self, carry_host: Any, template: Any) -> Any:
        """Host (numpy, key data for keys, R or padded rows) -> device carry like ``template``."""

        def put(x, t):
            x = self._pad(np.asarray(x))
            if is_key(t):
                return jax.random.wrap_key_data(_put(x, self.sharding), impl=jax.random.key_impl(t))
            return _put(x.astype(t.dtype), self.sharding)

        return jax.tree.map(put, carry_host, template)

    def host_carry(self, carry: Any) -> Any:
        """Device carry -> numpy (keys as key data), first R runs."""
        return jax.tree.map(lambda x: to_host(x)[: self.num_runs], carry)

    # ------------------------------------------------------------------ programs
    def init(self, keys: Array) -> ChunkState:
        """Initial carries of the runs (``keys``: typed key array (R,)) and their exact evaluation."""
        data = self._pad(np.asarray(jax.random.key_data(keys)))
        impl = jax.random.key_impl(keys)
        data = _put(data, self.sharding)

        def init_eval(kd, cfg):
            carry = self.learner.init(jax.random.wrap_key_data(kd, impl=impl), cfg)
            ev = self.learner.evaluate(carry)
            return carry, ev, chunk_health(carry, None, ev)

        prog = self._compiled("init", self._vmap(init_eval), *self._args(data))
        carry, (r, c), health = prog(*self._args(data))
        return ChunkState(
            carry=carry,
            iteration=0,
            metrics={},
            exact_iterations=np.array([0]),
            exact_reward=to_host(r)[: self.num_runs, None],
            exact_costs=to_host(c)[: self.num_runs, None],
            divergence=self._divergence(health, 0, 0, carry),
        )

    def _chunk_fn(self, length: int, mark: bool) -> Callable:
        learner = self.learner

        def chunk(carry, cfg):
            carry, metrics = jax.lax.scan(lambda c, _: learner.step(c, cfg), carry, None, length=length)
            if mark:  # an evaluation mark of make_train: the reported policy becomes a candidate
                carry = learner.mark(carry)
            ev = learner.evaluate(carry)
            return carry, metrics, ev, chunk_health(carry, metrics, ev)

        return self._vmap(chunk)

    def _divergence(self, health: dict[str, Any], start: int, length: int, carry: Any) -> Divergence | None:
        """The chunk's health reductions (device, tiny) -> a :class:`Divergence` or None."""
        health = jax.tree.map(lambda x: to_host(x)[: self.num_runs], health)
        state_ok, exact_ok = health["state"], health["exact"]
        metric_first = health.get("metrics", {})
        order = [k for k in ("reward", "costs", "multipliers") if k in metric_first]
        order += sorted(k for k in metric_first if k not in order)
        if state_ok.all() and exact_ok.all() and all((metric_first[k] < 0).all() for k in order):
            return None
        names = [name for name, _ in float_leaves(carry.state)]  # the leaves' paths (no indexing: multi-process)
        seeds, iterations, quantities, every = [], [], [], []
        for r in range(self.num_runs):
            found = [(int(metric_first[k][r]), f"metric {k}") for k in order if metric_first[k][r] >= 0]
            bad_leaves = [names[j] for j in np.flatnonzero(~state_ok[r])]
            here = [q for _, q in found] + [f"parameter {n}" for n in bad_leaves]
            if not exact_ok[r]:
                here.append("exact evaluation")
            if not here:
                continue
            seeds.append(r)
            if found:
                idx, q = min(found)
                iterations.append(start + idx + 1)
                quantities.append(q)
            else:
                iterations.append(start + length)
                quantities.append(here[0])
            every.extend(here)
        return Divergence(
            seeds=tuple(seeds),
            iterations=tuple(iterations),
            quantities=tuple(quantities),
            detected_at=start + length,
            all_quantities=tuple(dict.fromkeys(every)),
        )

    def advance(self, state: ChunkState) -> ChunkState:
        """One chunk: min(chunk_size, N - n) updates of every run, then exact evaluation."""
        length = min(self.chunk_size, self.num_iterations - state.iteration)
        if length <= 0:
            return state
        mark = state.iteration + length in self.marks
        prog = self._compiled(
            f"chunk{length}{'m' if mark else ''}", self._chunk_fn(length, mark), *self._args(state.carry)
        )
        t0 = time.perf_counter()
        carry, metrics, (r, c), health = prog(*self._args(state.carry))
        metrics = {k: to_host(v)[: self.num_runs] for k, v in metrics.items()}
        r, c = to_host(r)[: self.num_runs], to_host(c)[: self.num_runs]
        divergence = self._divergence(health, state.iteration, length, carry)
        if state.divergence is not None:
            divergence = state.divergence.merge(divergence)
        elapsed = time.perf_counter() - t0
        merged = {
            k: np.concatenate([state.metrics[k], v], axis=1) if k in state.metrics else v for k, v in metrics.items()
        }
        return ChunkState(
            carry=carry,
            iteration=state.iteration + length,
            metrics=merged,
            exact_iterations=np.append(state.exact_iterations, state.iteration + length),
            exact_reward=np.concatenate([state.exact_reward, r[:, None]], axis=1),
            exact_costs=np.concatenate([state.exact_costs, c[:, None]], axis=1),
            elapsed_s=state.elapsed_s + elapsed,
            divergence=divergence,
        )

    def run(
        self,
        state: ChunkState,
        *,
        on_chunk: Callable[[ChunkState], None] | None = None,
        max_chunks: int | None = None,
        stop_on_divergence: bool = True,
    ) -> ChunkState:
        """Advance until N updates (or ``max_chunks`` chunks), calling ``on_chunk`` after each;
        stop after the chunk in which a run diverged (``state.divergence``) unless
        ``stop_on_divergence`` is False (sweeps: diverged configurations are ranked last)."""
        done = 0
        while state.iteration < self.num_iterations and (max_chunks is None or done < max_chunks):
            if stop_on_divergence and state.divergence is not None:
                break
            state = self.advance(state)
            done += 1
            if on_chunk is not None:
                on_chunk(state)
        return state

    def policy_tables(self, state: ChunkState) -> np.ndarray:
        """The policies the runs return (:class:`~fhc_jax.algos.core.selection.Selection`),
        (R, H, S, A) numpy."""
        prog = self._compiled("policy", jax.vmap(lambda c: self.learner.policy_table(c.selection.state)), state.carry)
        return to_host(prog(state.carry))[: self.num_runs]

    def status(self, state: ChunkState) -> list[Status]:
        """Each run's :class:`~fhc_jax.algos.core.selection.Status` (host-side, from the metrics of a
        complete run: the multiplier's trend over the last three tenths, the cost over the last
        tenth, and whether the returned policy meets the constraints,
        :attr:`~fhc_jax.algos.core.scaffold.Learner.verify`: its exact costs where there is a
        tabular exact model, else its upper cost bounds)."""
        prog = self._compiled("verify", jax.vmap(self.learner.verify), state.carry)
        met, costs = (to_host(x)[: self.num_runs] for x in prog(state.carry))
        m, c = state.metrics["multipliers"], state.metrics["costs"]
        return [
            jax.tree.map(
                np.asarray,
                constraint_status(
                    m[r],
                    c[r],
                    self.learner.thresholds,
                    self.learner.violation_units,
                    self.learner.multiplier_units,
                    met[r],
                    costs[r],
                    multiplier_settings(self.learner.config),
                ),
            )
            for r in range(self.num_runs)
        ]

    def last_iterate_estimates(self, state: ChunkState) -> dict[str, np.ndarray]:
        """The learner's own estimates of each run's last iterate, made as at an evaluation mark
        (``learner.mark`` offering the iterate to an empty selection: the same episodes and
        bound as the selection used), beside the returned policy's: ``feasible`` (R,) bool (its
        upper 95% cost bounds within alpha), ``reward`` (R,), ``episodes`` (R,) (those of the
        estimate) and ``returned_reward`` (R,) (training units: compare them only with each
        other). One compiled program, the cost of
        one evaluation mark; the training state is not changed."""
        learner = self.learner

        def one(carry):
            sel = carry.selection
            empty = sel.replace(
                state=carry.state,
                iteration=jnp.full_like(sel.iteration, -1),
                reward=jnp.full_like(sel.reward, -jnp.inf),
                costs=jnp.full_like(sel.costs, jnp.inf),
                upper=jnp.full_like(sel.upper, jnp.inf),
                feasible=jnp.zeros_like(sel.feasible),
            )
            est = learner.mark(carry.replace(selection=empty)).selection
            return est.feasible, est.reward, sel.reward, est.episodes

        prog = self._compiled("estimate_last", jax.vmap(one), state.carry)
        feasible, reward, returned, episodes = (to_host(x)[: self.num_runs] for x in prog(state.carry))
        return {"feasible": feasible, "reward": reward, "returned_reward": returned, "episodes": episodes}

    def template(self, keys: Array) -> ChunkState:
        """A :class:`ChunkState` whose carry has the structure, shapes and dtypes of the runs'
        initial carries (what a checkpoint is restored into), from ``jax.eval_shape`` of the
        learner's init: nothing is compiled."""
        learner = self.learner
        shapes = jax.eval_shape(jax.vmap(lambda k: learner.init(k, learner.config)), keys)

        def leaf(s):
            if jax.dtypes.issubdtype(s.dtype, jax.dtypes.prng_key):
                k = jax.random.split(keys[0], s.shape) if s.shape else keys[0]
                if k.dtype != s.dtype:  # another key implementation: build it the slow way
                    raise TypeError
                return k
            return jnp.zeros(s.shape, s.dtype)

        try:
            carry = jax.tree.map(leaf, shapes)
        except TypeError:
            carry = jax.jit(jax.vmap(lambda k: learner.init(k, learner.config)))(keys)
        r = int(keys.shape[0])
        return ChunkState(
            carry=carry,
            iteration=0,
            metrics={},
            exact_iterations=np.zeros(1, np.int64),
            exact_reward=np.zeros((r, 1)),
            exact_costs=np.zeros((r, 1, 1)),
        )

    def drive(
        self,
        keys: Array,
        *,
        env: Any = None,
        params: Any = None,
        label: str | None = None,
        stream: IO[str] | None = None,
        overall: Callable[[float], str] | None = None,
        trackers: Trackers | None = None,
        restore: Callable[[ChunkState], ChunkState | None] | None = None,
        on_start: Callable[[ChunkState], None] | None = None,
        on_chunk: Callable[[ChunkState], None] | None = None,
        max_chunks: int | None = None,
        stop_on_divergence: bool = True,
    ) -> ChunkState:
        """Start the runs and train them in chunks: the one loop of every ``fhc-jax`` command.

        Args:
            keys: typed key array (R,) of the runs.
            env: the environment trained on (the progress line's speed and kind of evaluation).
            params: its params (the progress line's thresholds).
            label: the progress line's label (None: no progress line); stream: where it goes
                (default stderr); overall: its last part
                (:meth:`~fhc_jax.experiment.progress.RunsProgress.status`).
            trackers: :class:`~fhc_jax.experiment.tracking.Trackers` fed after every chunk
                (begun at the start state; the caller closes them).
            restore: ``template -> ChunkState | None``: a checkpoint restored into
                :meth:`template` (None: there is none, start from ``keys``).
            on_start: called with the start state (after the trackers begin); on_chunk: after
                every chunk.
            max_chunks: stop after this many chunks; stop_on_divergence: stop after the chunk
                in which a run diverged (False: sweeps rank diverged configurations last).
        Returns:
            the last :class:`ChunkState`.
        """
        state = restore(self.template(keys)) if restore is not None else None
        state = self.init(keys) if state is None else state
        if trackers is not None:
            trackers.begin(state.iteration, state.elapsed_s)
        if on_start is not None:
            on_start(state)
        progress = (
            None
            if label is None
            else Progress(
                label,
                self.num_iterations,
                self.num_runs,
                env_steps_per_iteration(self.learner.config, env.horizon),
                np.asarray(env.thresholds(params), np.float64),
                stream,
                state.iteration,
                state.elapsed_s,
                exact=judged_exactly(env),
                overall=overall,
            )
        )
        hooks = [h for h in (progress, None if trackers is None else trackers.log_chunk, on_chunk) if h is not None]

        def after_chunk(st: ChunkState) -> None:
            for hook in hooks:
                hook(st)

        return self.run(state, on_chunk=after_chunk, max_chunks=max_chunks, stop_on_divergence=stop_on_divergence)

    def result(self, state: ChunkState) -> RunResult:
        """The :class:`RunResult` of the runs at ``state`` (policy tables on tabular exact models)."""
        host = self.host_carry(state.carry)
        return RunResult(
            state=state,
            final_state=host.state,
            returned_state=host.selection.state,
            status=self.status(state) if state.iteration >= self.num_iterations else None,
            policy=None if self.learner.policy_table is None else self.policy_tables(state),
            compile_s=self.compile_s,
            run_s=state.elapsed_s,
            divergence=state.divergence,
            num_iterations=self.num_iterations,
        )


@dataclasses.dataclass
class RunResult:
    """What :func:`train_seeds` returns (R seeds, N iterations, E evaluations, M constraints).

    Attributes:
        state: the final :class:`ChunkState` (metrics (R, N, ...), exact evaluations (R, E, ...)).
        final_state: the learners' final train states, leading axis R (numpy; keys as key data).
        policy: the returned policies' tables, (R, H, S, A) (None without a tabular exact model).
        compile_s: seconds spent compiling; run_s: seconds in chunks (compile excluded).
        divergence: None when every seed stayed finite; otherwise the :class:`Divergence`
            (which seeds, from which iteration, in which quantity). Training stopped after the
            chunk that found it, so ``state.iteration`` < N (:attr:`complete` is False) and the
            diverged seeds' values are non-finite; the other seeds' results are valid at
            ``state.iteration``.
        returned_state: the train states of the returned policies (the learners'
            :class:`~fhc_jax.algos.core.selection.Selection`), leading axis R (numpy).
        status: each seed's :class:`~fhc_jax.algos.core.selection.Status` (None before the run is
            complete).
    """

    state: ChunkState
    final_state: Any
    policy: np.ndarray | None
    compile_s: float
    run_s: float
    divergence: Divergence | None = None
    num_iterations: int | None = None
    returned_state: Any = None
    status: list[Status] | None = None

    @property
    def complete(self) -> bool:
        """All N iterations done and every seed finite."""
        n = self.num_iterations if self.num_iterations is not None else self.state.iteration
        return self.divergence is None and self.state.iteration >= n

    @property
    def finite_seeds(self) -> np.ndarray:
        """Indices of the seeds that stayed finite, (R',) int."""
        bad = set(() if self.divergence is None else self.divergence.seeds)
        return np.array([r for r in range(self.state.exact_reward.shape[0]) if r not in bad], dtype=np.int64)


def train_seeds(
    module,
    env,
    params,
    config,
    num_seeds: int,
    *,
    seed: int = 0,
    chunk_size: int | None = None,
    on_chunk: Callable[[ChunkState], None] | None = None,
    shard: bool = True,
    **drive: Any,
) -> RunResult:
    """Train one learner on ``num_seeds`` seeds in chunks and return everything measured.

    Args:
        module: the learner module (``fhc_jax.algos.fh_constrained``, or
            ``fhc_jax.experiment.config.load_algorithm(name)``).
        env: the environment.
        params: its params.
        config: the module's ``Config``.
        num_seeds: R; seed i starts from ``fold_in(key(seed), i)`` (:func:`seed_keys`).
        chunk_size: iterations per chunk (default ``config.eval_every`` or 100).
        on_chunk: called with the :class:`ChunkState` after every chunk.
        shard: split the seeds over all devices.
        drive: more options of :meth:`ChunkedTrainer.drive` (``label``, ``stream``,
            ``overall``, ``trackers``).
    Returns:
        :class:`RunResult`; when a seed diverges (non-finite values), training stops after that
        chunk and ``RunResult.divergence`` says which seeds, where and in what.
    """
    chunk = chunk_size or int(getattr(config, "eval_every", 0) or 100)
    trainer = ChunkedTrainer(
        module.make_learner(env, params, config), num_seeds, min(chunk, config.num_iterations), shard=shard
    )
    state = trainer.drive(seed_keys(seed, num_seeds), env=env, params=params, on_chunk=on_chunk, **drive)
    return trainer.result(state)
