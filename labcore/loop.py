"""One training loop for every jitted training program: run folder, chunks, metrics, checkpoints, resume.

An algorithm describes its training as a ``Program``, a few pure functions and numbers:

    init(key) -> state            a fresh training state: a pytree holding everything training
                                  carries (parameters, optimiser, envs, replay, PRNG key, counters)
    run(state, n) -> (state, m)   n more updates, pure and traceable (n static); m: metrics, leaves [n]
    updates_done(state) -> int    how far a state has got, in updates
    num_updates                   updates in the whole run
    steps_per_update              env steps (transitions) per update (a GFlowNet: trajectories,
                                  ``unit="trajectory"``)

and ``train(config, make_program, ...)`` runs it: it opens the run folder (``labcore.runs.RunDir``),
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
``"timesteps"``. Without ``log_every``, a run logs about 100 rows (``default_log_every``), as every
driver does, the host-driven ones (``labcore.host_run``) included.

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

from labcore import runs

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


class RunResult(NamedTuple):
    """What every algorithm's ``train`` returns."""

    config: Any
    state: Any  # the final training state (e.g. PPO's RunnerState); with seeds=k, every leaf is [k, ...]
    metrics: list[dict[str, Any]]  # the rows this call logged (a resumed run: those since the resume)
    summary: dict[str, Any]  # what summary.json holds
    run_dir: str | None

    @classmethod
    def of_run(cls, config: Any, state: Any, run: runs.RunDir, summary: dict[str, Any]) -> RunResult:
        """The result of a run written through ``run`` (its rows, its folder or None in memory)."""
        return cls(config, state, run.rows, summary, None if run.path is None else str(run.path))


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
) -> RunResult:
    """Train ``make_program(config, callback, log_every)`` end to end, in ``run_dir`` if given.

    log_every: updates between metrics rows (default: ``default_log_every`` of the program's
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
        log_every = default_log_every(make_program(config).num_updates)

    def log_row(metrics: dict[str, Any]) -> None:
        if on_metrics is not None:
            on_metrics(metrics)
        row = run.log({"update": int(metrics["update"]), **{k: v for k, v in metrics.items() if k != "update"}})
        bar.update(int(row["update"]) * program.steps_per_update - bar.n)
        show_on_bar(bar, row, program.shown)

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
    run = runs.RunDir.open(run_dir, config, step_key="update", resume=resume, overwrite=overwrite, primary=primary,
                           tensorboard=tensorboard, like=state if resume else None,
                           written_with={"algorithm": program.algorithm, **written_with})
    if resume:
        state = run.restored[0]
        if program.after_restore is not None:
            state = program.after_restore(state)
    first_update = updates_done(program, state, seeds)
    total_steps = program.num_updates * program.steps_per_update
    bar = runs.progress_bar(total_steps, desc=program.name, unit=program.unit, unit_scale=True,
                            enabled=progress and primary, initial=first_update * program.steps_per_update)

    every = checkpoint_every or program.num_updates
    ends = {*range(first_update + every, program.num_updates, every), program.num_updates}  # chunks end at checkpoints
    if eval_every is not None:
        ends |= set(range(eval_every, program.num_updates, eval_every))  # and at evaluations
    ends = sorted(end for end in ends if end > first_update)
    sizes = [end - start for start, end in zip([first_update, *ends], ends)]
    compile_s = run_s = 0.0
    checked: dict[str, Any] = {}
    done = first_update  # counted here: reading it from a state of several seeds would copy every leaf

    def summarize_call(rows):
        return run_summary(config, rows, updates=done, steps=done * program.steps_per_update,
                           steps_run=(done - first_update) * program.steps_per_update * (seeds or 1), compile_s=compile_s,
                           run_s=run_s, seeds=seeds, unit=program.unit, unit_plural=program.unit_plural)

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
        if run.checkpoints is not None and ((done - first_update) % every == 0 or done == program.num_updates):
            save_checkpoint(run.checkpoints, program.config, state, done, written_with, program.algorithm)
            now = time.perf_counter()
            if stop_after_s is not None and done < program.num_updates and now + (now - chunk_began) - started > stop_after_s:
                bar.close()
                run.finish()
                # this call's times, so that a run trained in slices can add its calls up
                return RunResult.of_run(config, state, run, {"stopped_at_update": done, **summarize_call([])})
        chunk_began = time.perf_counter()
    bar.close()

    rows = run.history()
    summary = summarize_call(rows)
    if program.summarize is not None:
        summary.update(program.summarize(rows))
    summary.update(checked)
    if evaluate and program.evaluate is not None and done == program.num_updates and eval_every is not None:
        summary.update(log_evaluation(run, program, state, config.seed, seeds, done))
    elif evaluate and program.evaluate is not None:
        summary.update(_evaluate(program, state, config.seed, seeds))
    run.finish(summary, lambda rows: plot(rows, program))
    return RunResult.of_run(config, state, run, summary)


def default_log_every(num_updates: int) -> int:
    """Every driver's ``log_every`` when none is given: about 100 rows in a run of ``num_updates``
    updates (a row every update in a run of fewer than 200)."""
    return max(1, num_updates // 100)


def count_key(unit: str = "step", unit_plural: str = "steps") -> str:
    """The key of the units done, in a summary and in a row: "timesteps" for env steps, else the
    unit's plural (e.g. "trajectories")."""
    return "timesteps" if unit == "step" else unit_plural


def run_summary(config: Any, rows: list[dict[str, Any]], *, updates: int, steps: int, steps_run: int,
                compile_s: float | None, run_s: float, seeds: int | None = None, unit: str = "step",
                unit_plural: str = "steps") -> dict[str, Any]:
    """The entries every driver's summary.json starts with, ``train``'s and the host-driven ones'
    (``labcore.host_run``): env, seeds, the units done (``count_key``: "timesteps" or e.g.
    "trajectories"), updates, compile_s, run_s, ``<unit_plural>_per_second`` and, when a row holds an
    episode return, final_episode_return.

    rows: every row of the run. steps: the units done in all (a resumed run's earlier ones too);
    steps_run: those this call ran (every seed's), which the rate divides by run_s. compile_s: None
    for a driver whose compiles happen inside its loop (they are then part of run_s).
    final_episode_return: the mean of the last tenth of the rows' returns, of the rows that saw an
    episode end (a DQN row of a few agent steps may not).
    """
    returns = [row["episode_return"] for row in rows
               if row.get("episode_return") is not None and np.isfinite(row["episode_return"])]
    recent = returns[-max(1, len(returns) // 10):]
    summary = {
        "env": getattr(config, "env_id", None),
        "seeds": seeds or 1,
        count_key(unit, unit_plural): steps,
        "updates": updates,
        "compile_s": None if compile_s is None else round(compile_s, 2),
        "run_s": round(run_s, 2),
        f"{unit_plural}_per_second": round(steps_run / run_s, 1) if run_s > 0 else None,
    }
    if any("episode_return" in row for row in rows):
        summary["final_episode_return"] = float(np.mean(recent)) if recent else None
    return summary


def show_on_bar(bar: Any, row: Mapping[str, Any], shown: Mapping[str, str]) -> None:
    """Show a logged row's metrics on a progress bar (``Program.shown``: label -> metric), once
    the row holds every one of them."""
    values = {label: row.get(name) for label, name in shown.items()}
    if values and all(value is not None for value in values.values()):
        bar.set_postfix({label: f"{value:.2f}" for label, value in values.items()}, refresh=False)


def log_evaluation(run: runs.RunDir, program: Program, state: Any, seed: int, seeds: int | None,
                   update: int) -> dict[str, Any]:
    """The program's evaluation of ``state`` at ``update``, its numbers logged as one row (the
    ``eval_`` ones as they are, the others prefixed); returns the evaluation."""
    entries = _evaluate(program, state, seed, seeds)
    numbers = {(name if name.startswith("eval_") else f"eval_{name}"): value for name, value in entries.items()
               if isinstance(value, (int, float, np.number)) and not isinstance(value, bool)}
    run.log({"update": update, count_key(program.unit, program.unit_plural): update * program.steps_per_update, **numbers})
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


def trainer(make_program: MakeProgram, algorithm: str) -> Callable[..., RunResult]:
    """An algorithm's ``train(config, run_dir=None, **options)``: ``labcore.loop.train`` with its
    ``make_program`` bound. Every algorithm on the loop exports one, so they share one signature."""

    def train_algorithm(config: Any, run_dir: str | os.PathLike | None = None, **options: Any) -> RunResult:
        return train(config, make_program, run_dir, **options)

    train_algorithm.__name__ = train_algorithm.__qualname__ = "train"
    train_algorithm.__module__ = make_program.__module__  # documented, and linked, beside its program
    train_algorithm.__doc__ = (
        f"Train {algorithm} with ``labcore.loop.train`` (same keyword options: log_every, checkpoint_every, "
        f"resume, overwrite, progress, tensorboard, evaluate, seeds, on_metrics; every count in updates).")
    return train_algorithm


# What a host-driven trainer beside a program (a loop of Python calls, run to its end in one call)
# takes of train's options; the others need the program.
HOST_OPTIONS = ("overwrite", "tensorboard", "evaluate", "progress")
PROGRAM_OPTIONS = ("checkpoint_every", "resume", "seeds", "on_metrics")


def refuse_program_options(options: Mapping[str, Any], setting: str, value: Any, program: str) -> None:
    """For an algorithm whose config field ``setting`` chose a host-driven trainer (``value``):
    ValueError naming ``setting`` for any of ``PROGRAM_OPTIONS`` asked for (``program``: what to
    choose instead), TypeError for an option ``train`` does not have."""
    asked = sorted(name for name, given in options.items() if name not in HOST_OPTIONS and given not in (None, False))
    if asked:
        raise ValueError(f"{setting}: {', '.join(asked)} {'needs' if len(asked) == 1 else 'need'} {program}; "
                         f"the {value!r} {setting} runs to its end in one call, without checkpoints")
    unknown = sorted(set(options) - set(HOST_OPTIONS) - set(PROGRAM_OPTIONS))
    if unknown:
        raise TypeError(f"train() got unexpected keyword arguments {unknown}")


def plot(rows: list[dict[str, Any]], program: Program):
    """The run's metrics.png: ``program.plotted`` against ``program.x_key`` (env steps)."""
    from labcore.logging import plot_metrics

    return plot_metrics(rows, program.plotted, x_key=program.x_key, title=program.name)


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
