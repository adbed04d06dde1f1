"""One training loop for every jitted training program: run folder, chunks, metrics, checkpoints, resume.

An algorithm describes its training as a ``Program``, a few pure functions and numbers:

    init(key) -> state            a fresh training state: a pytree holding everything training
                                  carries (parameters, optimiser, envs, replay, PRNG key, counters)
    run(state, n) -> (state, m)   n more updates, pure and traceable (n static); m: metrics, leaves [n]
    updates_done(state) -> int    how far a state has got, in updates
    num_updates                   updates in the whole run
    steps_per_update              env steps (transitions) per update (a GFlowNet: trajectories,
                                  ``unit="trajectory"``)

and ``train(config, make_program, ...)`` runs it: it opens the run (``labcore.training_run.TrainingRun``, as
every driver does: the folder, the progress bar, the rows, the summary and the plot),
compiles ``run`` once per chunk size, runs chunks of ``checkpoint_every`` updates with an orbax
checkpoint of the whole state after each, logs a metrics row every ``log_every`` updates while the
compiled chunk runs (the rows reach the host in bursts, see ``labcore.logged_scan``), resumes exactly from
the newest intact checkpoint, and ends with evaluation, ``summary.json`` and ``metrics.png``.
``eval_every`` adds evaluations while training (logged as rows at their update); ``stop_after_s``
stops at a checkpoint before a time budget runs out, and the same call with ``resume`` goes on.
PPO, PQN, the jitted DQN, the all-JAX GFlowNet trainer and IQN's fused mode run on it
(``labcore.agents.<algo>.train``), and so does the data-parallel DQN over every device of several
processes (``labcore.agents.dqn.multi_process``: process 0 writes the folder, every process the checkpoints).

**Units.** ``log_every`` and ``checkpoint_every`` count *updates*: one pass of the program's loop,
``steps_per_update`` env steps and one learning step (PPO, PQN: one rollout and its epochs of
minibatches; the jitted DQN: ``train_frequency`` agent steps and one gradient step, none during
the replay warm-up). Metrics rows carry the update as ``"update"`` and the env steps as
``"timesteps"``. Without ``log_every``, a run logs about 100 rows (``training_run.default_log_every``), as
every driver does, the host-driven ones included.

**Same result however it is cut.** The state carries everything, so 3 + 3 updates give the same
state as 6, and a run killed after a checkpoint and resumed logs the same rows as one that was not.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from labcore import training_run

Metrics = dict[str, jax.Array]


class Program(NamedTuple):
    """A configured training program: the functions above, and what the driver shows of it."""

    config: Any  # the validated config dataclass it was built from
    init: Callable[[jax.Array], Any]
    run: Callable[[Any, int], tuple[Any, Metrics]]
    updates_done: Callable[[Any], int]
    num_updates: int
    steps_per_update: int
    name: str  # progress bar and plot title, e.g. "PPO on Vault-v0"
    plotted: tuple[str, ...] = ("episode_return",)  # metrics drawn in metrics.png
    shown: Mapping[str, str] = {}  # progress-bar label -> metric, e.g. {"ret": "episode_return"}
    # (final state, the run's seed) -> summary entries; the seed picks the evaluation's own key
    evaluate: Callable[[Any, int], dict[str, Any]] | None = None
    summarize: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None  # all rows -> summary entries
    unit: str = "step"  # what steps_per_update counts (the progress bar's unit)
    unit_plural: str = "steps"  # the summary's totals: "timesteps" (env steps) or e.g. "trajectories"
    x_key: str = "timesteps"  # the metric metrics.png is drawn against
    # True: run calls make_program's callback with each logged row while it runs. False (a program
    # sharded over several processes, whose host callbacks would fire on every device): the driver
    # logs the rows of each chunk's returned metrics after the chunk, as it does for seeds.
    streams_metrics: bool = True
    # state -> summary entries, called on the host after every chunk, before its checkpoint: a check
    # that raises to stop the run (the data-parallel DQN compares its processes' parameters here)
    check: Callable[[Any], dict[str, Any]] | None = None
    # what a resume must match besides the config, saved in every checkpoint (e.g. {"devices": 4}:
    # a state laid out for 4 devices restores on 4)
    written_with: Mapping[str, Any] = {}
    # how a chunk's lowered program is compiled (default ``lowered.compile()``), e.g. with compiler options
    compile: Callable[[jax.stages.Lowered], jax.stages.Compiled] | None = None
    # the registry name its checkpoints record ("ppo", "dqn-scan", ...; labcore.agents.registry), so
    # that another algorithm's loader or resume refuses them by name; "" for a program outside the registry
    algorithm: str = ""
    # a state just read from a checkpoint -> the state to go on from: a program whose envs live outside
    # JAX (ALE's emulators, labcore.envs.ale_vector) brings them back to the checkpoint here
    after_restore: Callable[[Any], Any] | None = None
    # why this program trains one seed per call ("" : any number, vmapped); train refuses seeds=N with it
    one_seed: str = ""


MakeProgram = Callable[..., Program]  # (config, callback=None, log_every=1) -> Program


class Chunk(NamedTuple):
    """One compiled call of a program's ``run``, as ``chunks`` yields it."""

    state: Any  # the state after the chunk
    metrics: Metrics  # leaves [n] (with seeds: [seeds, n]), as numpy arrays
    updates: int  # n, the updates this chunk ran
    compile_s: float  # the compile this chunk needed (0 when its size was compiled before)
    run_s: float  # the chunk's run time, every metrics callback included


# The name of the vmapped axis of seeds in ``chunks`` and ``train(seeds=...)``.
SEEDS_AXIS = "seeds"


def same_for_all_seeds(value: jax.Array) -> jax.Array:
    """A value every seed holds alike (a step count), as one unbatched value inside the vmap over
    seeds of ``chunks``.

    Under ``jax.vmap`` a ``lax.cond`` on a per-seed predicate runs both branches and selects;
    on a value reduced over the ``SEEDS_AXIS`` axis it stays a cond (e.g. the jitted DQN learns
    only after its replay warm-up, and a vmapped run must not pay the update during the warm-up).
    Outside that vmap, the value itself."""
    try:
        return jax.lax.pmin(value, SEEDS_AXIS)
    except NameError:  # SEEDS_AXIS is not bound: no vmap over seeds around this call
        return value


def seed_slice(state: Any, index: int) -> Any:
    """Seed ``index``'s state out of a state whose leaves are [seeds, ...]."""
    return jax.tree.map(lambda leaf: leaf[index], state)


def updates_done(program: Program, state: Any, seeds: int | None = None) -> int:
    """``program.updates_done`` of a state of one seed, or of several (all of them move together)."""
    return program.updates_done(state if seeds is None else seed_slice(state, 0))


def chunks(program: Program, state: Any, sizes: Iterable[int], *, seeds: int | None = None) -> Iterator[Chunk]:
    """Run ``program.run`` in compiled chunks of ``sizes`` updates, yielding after each.

    Each distinct size compiles once (the first chunk of that size pays it, reported apart from the
    run time). seeds: the state holds that many seeds (leaves [seeds, ...]) and ``run`` is vmapped
    over them, the chunk size shared. The caller decides when to stop: a learning curve may end
    when a score is reached, ``train`` when ``program.num_updates`` is.
    """
    run_n = program.run if seeds is None else (
        lambda state, n: jax.vmap(lambda one: program.run(one, n), axis_name=SEEDS_AXIS)(state))
    run_chunk = jax.jit(run_n, static_argnums=1)
    compiled: dict[int, Any] = {}
    for size in sizes:
        compile_s = 0.0
        if size not in compiled:
            started = time.perf_counter()
            lowered = run_chunk.lower(state, size)
            compiled[size] = lowered.compile() if program.compile is None else program.compile(lowered)
            compile_s = time.perf_counter() - started
        started = time.perf_counter()
        state, metrics = jax.block_until_ready(compiled[size](state))
        jax.effects_barrier()  # every metrics callback of the chunk has run
        run_s = time.perf_counter() - started
        yield Chunk(state, jax.tree.map(np.asarray, metrics), size, compile_s, run_s)


def seed_keys(seed: int, seeds: int | None) -> jax.Array:
    """The runs' keys: ``key(seed)``, or ``[key(seed), key(seed + 1), ...]`` for ``seeds`` runs at
    once, so that seed i of a vmapped run is the run a config with ``seed + i`` makes alone."""
    if seeds is None:
        return jax.random.key(seed)
    return jnp.stack([jax.random.key(seed + index) for index in range(seeds)])


def _chunk_rows(metrics: Metrics, first_update: int, log_every: int, seeds: int | None) -> list[dict[str, Any]]:
    """The logged rows of a chunk's returned metrics (leaves [n], or [seeds, n]), each keyed by its
    update. Over seeds each value is their mean (NaN-aware: a seed with no finished episode does
    not count) and a count the same for all seeds is kept exact."""
    if seeds is None:
        metrics = {name: values[None] for name, values in metrics.items()}
    count = next(iter(metrics.values())).shape[1]
    rows = []
    for index in range(count):
        update = first_update + index + 1
        if update % log_every:
            continue
        row: dict[str, Any] = {"update": update}
        for name, values in metrics.items():
            column = values[:, index]  # [seeds, *metric shape]
            if np.issubdtype(column.dtype, np.integer) and (column == column[0]).all():
                mean = column[0]
            else:
                with np.errstate(invalid="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # every seed NaN: the mean is NaN
                    mean = np.nanmean(column.astype(np.float64), axis=0)
            row[name] = mean.tolist() if np.ndim(mean) else mean.item()
        rows.append(row)
    return rows


def train(
    config: Any,
    make_program: MakeProgram,
    run_dir: str | os.PathLike | None = None,
    *,
    log_every: int | None = None,
    checkpoint_every: int | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    tensorboard: bool = True,
    evaluate: bool = True,
    seeds: int | None = None,
    on_metrics: Callable[[dict[str, np.ndarray]], None] | None = None,
    eval_every: int | None = None,
    stop_after_s: float | None = None,
) -> training_run.RunResult:
    """Train ``make_program(config, callback, log_every)`` end to end, in ``run_dir`` if given.

    log_every: updates between metrics rows (default: ``training_run.default_log_every`` of the program's
    updates, about 100 rows). checkpoint_every: updates per chunk (default: the whole run in one
    chunk, checkpointed at the end; without ``run_dir`` nothing is saved). resume: continue from
    the newest intact checkpoint in run_dir (see ``labcore.runs.RunDir.open``): the rows past it
    are dropped and logged again, so the folder reads as one run. overwrite: replace an earlier run
    in run_dir (without it or resume, one is refused). evaluate: run the program's evaluation at
    the end. on_metrics: also called with each logged row's metrics (numpy), before it is written.
    eval_every: also run the program's evaluation every this many updates while training (the run
    is cut into chunks there too) and at the end; each evaluation's numbers are logged as a row of
    their own at that update, prefixed ``eval_`` as in the summary (metrics.jsonl and TensorBoard;
    metrics.csv keeps the training columns), before that chunk's checkpoint, so a resumed run
    evaluates again what its checkpoint did not hold.
    stop_after_s: stop at a checkpoint, as if interrupted there, when one more chunk (timed as the
    last, its evaluation included) would end past this many seconds from the call, for a job's time
    limit (``resume=True`` goes on). A stopped run writes no evaluation, summary.json or plot; its
    result's summary is ``stopped_at_update`` and this call's times (updates, compile, run, rate).

    seeds: train that many seeds at once, ``config.seed``, ``config.seed + 1``, ... in one
    ``jax.vmap``; seed i ends where a run of ``config.seed + i`` alone ends, to float rounding
    (XLA compiles the batched program on its own; tests/test_equivalence.py measures it). The
    state's leaves gain a leading [seeds] axis, a row holds each metric's mean over all seeds
    (written after each chunk, not during it), and the summary the mean of the evaluations with
    each seed's own beside it (``"per_seed"``).
    """
    if checkpoint_every is not None and checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be >= 1 update, got {checkpoint_every}")
    if seeds is not None and seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    if eval_every is not None and eval_every < 1:
        raise ValueError(f"eval_every must be >= 1 update, got {eval_every}")
    if stop_after_s is not None and (run_dir is None or checkpoint_every is None):
        raise ValueError("stop_after_s: a run stopped early goes on from a checkpoint; give run_dir and checkpoint_every")
    started = time.perf_counter()
    if log_every is None:  # the program's length is known once it is built: a first build reads it
        log_every = training_run.default_log_every(make_program(config).num_updates)

    def log_row(metrics: dict[str, Any]) -> None:
        if on_metrics is not None:
            on_metrics(metrics)
        update = int(metrics["update"])
        run.log(update, {k: v for k, v in metrics.items() if k != "update"})
        run.advance(update * program.steps_per_update)

    # First: a bad config or env id fails here, before anything is written or compiled. Vmapped
    # seeds log from each chunk's returned metrics, so their program has no callback.
    program = make_program(config, callback=log_row if seeds is None else None, log_every=log_every)
    if seeds is not None and program.written_with:
        raise ValueError(f"seeds: {program.name} runs one seed (its state is laid out over {dict(program.written_with)})")
    if seeds is not None and program.one_seed:
        raise ValueError(f"seeds: {program.one_seed}")
    if eval_every is not None and program.evaluate is None:
        raise ValueError(f"eval_every: {program.name} has no evaluation")
    chunk_rows = seeds is not None or not program.streams_metrics  # rows logged after each chunk
    init = program.init if seeds is None else jax.vmap(program.init)
    state = init(seed_keys(config.seed, seeds))
    # a state of another number of seeds (or another layout) will not restore: refused by name
    written_with = {"seeds": seeds, **program.written_with}
    primary = jax.process_index() == 0  # of several processes, the first writes the folder
    run = training_run.TrainingRun.open(
        run_dir, config, name=program.name, total_steps=program.num_updates * program.steps_per_update,
        unit=program.unit, unit_plural=program.unit_plural, plotted=program.plotted, shown=program.shown,
        x_key=program.x_key, step_key="update", resume=resume, overwrite=overwrite, tensorboard=tensorboard,
        progress=progress, primary=primary, like=state if resume else None,
        written_with={"algorithm": program.algorithm, **written_with})
    if resume:
        state = run.folder.restored[0]
        if program.after_restore is not None:
            state = program.after_restore(state)
    first_update = updates_done(program, state, seeds)
    run.start(first_update * program.steps_per_update)

    every = checkpoint_every or program.num_updates
    ends = {*range(first_update + every, program.num_updates, every), program.num_updates}  # chunks end at checkpoints
    if eval_every is not None:
        ends |= set(range(eval_every, program.num_updates, eval_every))  # and at evaluations
    ends = sorted(end for end in ends if end > first_update)
    sizes = [end - start for start, end in zip([first_update, *ends], ends)]
    compile_s = run_s = 0.0
    checked: dict[str, Any] = {}
    done = first_update  # counted here: reading it from a state of several seeds would copy every leaf

    chunk_began = time.perf_counter()
    for chunk in chunks(program, state, sizes, seeds=seeds):
        state, compile_s, run_s = chunk.state, compile_s + chunk.compile_s, run_s + chunk.run_s
        before, done = done, done + chunk.updates
        if chunk_rows:
            for row in _chunk_rows(chunk.metrics, before, log_every, seeds):
                log_row(row)
        if program.check is not None:
            checked = program.check(state)
        if eval_every is not None and done % eval_every == 0 and done < program.num_updates:
            log_evaluation(run, program, state, config.seed, seeds, done)
        if run.folder.checkpoints is not None and ((done - first_update) % every == 0 or done == program.num_updates):
            save_checkpoint(run.folder.checkpoints, program.config, state, done, written_with, program.algorithm)
            now = time.perf_counter()
            if stop_after_s is not None and done < program.num_updates and now + (now - chunk_began) - started > stop_after_s:
                # this call's times, so that a run trained in slices can add its calls up
                return run.end_early(state, {"stopped_at_update": done, **run.summary(
                    updates=done, steps=done * program.steps_per_update, compile_s=compile_s, run_s=run_s, seeds=seeds,
                    rows=[])})
        chunk_began = time.perf_counter()
    run.stop()

    extra = {} if program.summarize is None else program.summarize(run.folder.history())
    extra.update(checked)
    evaluation = {}
    if evaluate and program.evaluate is not None and done == program.num_updates and eval_every is not None:
        evaluation = log_evaluation(run, program, state, config.seed, seeds, done)
    elif evaluate and program.evaluate is not None:
        evaluation = _evaluate(program, state, config.seed, seeds)
    return run.finish(state, updates=done, steps=done * program.steps_per_update, compile_s=compile_s, run_s=run_s,
                      seeds=seeds, extra=extra, evaluation=evaluation)


def log_evaluation(run: training_run.TrainingRun, program: Program, state: Any, seed: int, seeds: int | None,
                   update: int) -> dict[str, Any]:
    """The program's evaluation of ``state`` at ``update``, its numbers logged as one row (the
    ``eval_`` ones as they are, the others prefixed); returns the evaluation."""
    entries = _evaluate(program, state, seed, seeds)
    numbers = {(name if name.startswith("eval_") else f"eval_{name}"): value for name, value in entries.items()
               if isinstance(value, (int, float, np.number)) and not isinstance(value, bool)}
    run.log(update, numbers, steps=update * program.steps_per_update)
    return entries


def _evaluate(program: Program, state: Any, seed: int, seeds: int | None) -> dict[str, Any]:
    """The program's evaluation; for several seeds, each seed's (with its own seed) and their mean."""
    if seeds is None:
        return program.evaluate(state, seed)
    per_seed = [program.evaluate(seed_slice(state, index), seed + index) for index in range(seeds)]
    means = {name: float(np.mean([entry[name] for entry in per_seed])) for name, value in per_seed[0].items()
             if isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
             and any(entry[name] != value for entry in per_seed)}  # a setting (eval_episodes) stays as it is
    return {**per_seed[0], **means, "per_seed": per_seed}


def trainer(make_program: MakeProgram, algorithm: str) -> Callable[..., training_run.RunResult]:
    """An algorithm's ``train(config, run_dir=None, **options)``: ``labcore.loop.train`` with its
    ``make_program`` bound. Every algorithm on the loop exports one, so they share one signature."""

    def train_algorithm(config: Any, run_dir: str | os.PathLike | None = None,
                        **options: Any) -> training_run.RunResult:
        return train(config, make_program, run_dir, **options)

    train_algorithm.__name__ = train_algorithm.__qualname__ = "train"
    train_algorithm.__module__ = make_program.__module__  # documented, and linked, beside its program
    train_algorithm.__doc__ = (
        f"Train {algorithm} with ``labcore.loop.train`` (same keyword options: log_every, checkpoint_every, "
        f"resume, overwrite, progress, tensorboard, evaluate, seeds, on_metrics; every count in updates).")
    return train_algorithm


def save_checkpoint(directory: str | os.PathLike, config: Any, state: Any, step: int,
                    written_with: Mapping[str, Any] | None = None, algorithm: str = ""):
    """Checkpoint ``state`` at update ``step``, its metadata in the schema of ``labcore.checkpoint``
    (``algorithm``: ``Program.algorithm``; driver "labcore.loop"), with "update_step" and
    ``written_with`` (the number of seeds, ``Program.written_with``) beside it. Every process of a
    multi-process run calls it."""
    from labcore import checkpoint  # here: orbax loads only for a run that writes a checkpoint

    return checkpoint.save_run(directory, step, state, algorithm=algorithm, driver=__name__, config=config,
                               **{"update_step": step, "seeds": None, **(written_with or {})})


def load_checkpoint(path: str | os.PathLike, config_class: type, make_program: MakeProgram,
                    step: int | None = None, algorithm: str = "") -> tuple[Any, Any]:
    """(config, state) from a run folder or its checkpoints/ folder (default: the newest step); a
    run of several seeds gives their state, leaves [seeds, ...]. algorithm: the registry name of
    ``make_program``'s programs; a checkpoint of another is refused before anything is built
    (``labcore.checkpoint.expect``: WrongCheckpoint, naming what the folder holds)."""
    from labcore import checkpoint

    directory, metadata, config = checkpoint.open_run(path, algorithm, config_class, step)
    seeds = metadata.get("seeds")
    init = make_program(config).init if seeds is None else jax.vmap(make_program(config).init)
    like = init(seed_keys(config.seed, seeds))  # real arrays: typed keys need a real example
    state, _ = checkpoint.restore(directory, like=like, step=step)
    return config, state
