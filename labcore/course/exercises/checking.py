"""The exercise record, the catalogue, and the comparison of a learner's output with the reference's.

The package ``labcore.course.exercises`` re-exports the public names; each lesson's folder
(``labcore.course.lessons.nbNN_<topic>``) holds its exercises themselves.
"""

from __future__ import annotations

import dataclasses
import textwrap
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

InputMaker = Callable[[np.random.Generator], tuple]


@dataclasses.dataclass(frozen=True)
class Exercise:
    """One exercise: a reference function and a way to draw random inputs for it."""

    name: str
    description: str  # first line: the task; the rest: the hint that hint(name) prints on request
    reference: Callable[..., Any]
    make_inputs: InputMaker  # rng -> positional arguments for both functions
    trials: int = 5
    rtol: float = 1e-5
    atol: float = 1e-6
    jit: bool = False  # the learner's function must also run under jax.jit
    # How the learner's function is run, e.g. under jax.pmap; the default calls it as it is.
    run_with: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None
    # A worked answer, written as a learner would write it (not a call into labcore): shown on
    # request by ``solution(name)``, never under the exercise, and checked by the tests.
    solution: Callable[..., Any] | None = None
    # The classic wrong answers, each (what is wrong with it, the function). The tests check that
    # each fails; ``check`` names the one a failing answer reproduces, which is the useful hint.
    mistakes: tuple[tuple[str, Callable[..., Any]], ...] = ()
    # True for the algorithm's own update or loss (the DQN update, PPO's clipped loss), False for
    # a helper around it; every training notebook sets at least one core exercise.
    core: bool = False
    # Where the convention is free (how a key is split, which permutation shuffles a batch), the
    # answer is judged by what it does, not by equality with the reference: ``judge(fn, rng)`` runs
    # the learner's function on inputs it draws from ``rng`` and returns None, or a sentence saying
    # what the answer does wrong. ``reference`` and ``make_inputs`` remain one right answer and its
    # inputs. A classic mistake is named when the judge finds the same fault in it, word for word.
    judge: Callable[[Callable[..., Any], np.random.Generator], str | None] | None = None
    # Inputs every check tries first, whatever its seed (a boundary an off-by-one mistake falls on):
    # ``edge_inputs(rng)`` returns a list of argument tuples, run before the ``trials`` random ones.
    edge_inputs: Callable[[np.random.Generator], list[tuple]] | None = None


_REGISTRY: dict[str, Exercise] = {}
_NOTEBOOK_OF: dict[str, str] = {}  # exercise name -> the notebook that sets it
_RESULTS: dict[str, bool] = {}  # exercise name -> whether its latest check in this process passed


def _checked(exercise: Exercise, taken: set[str]) -> Exercise:
    """``exercise``, or a ValueError naming what makes it unfit for the catalogue (``taken``: names in use)."""
    if exercise.name in taken:
        raise ValueError(f"exercise {exercise.name!r} is already registered")
    if exercise.trials < 1:
        raise ValueError(f"exercise {exercise.name!r}: trials must be >= 1, got {exercise.trials}")
    if exercise.core and (exercise.solution is None or len(exercise.mistakes) < 2):
        raise ValueError(f"exercise {exercise.name!r}: a core exercise needs a solution and at least two mistakes")
    return exercise


def register(exercise: Exercise, notebook: str | None = None) -> Exercise:
    """Add an exercise to the catalogue, after every lesson's (names are unique); ``notebook`` names
    the lesson that sets it, for ``progress``."""
    catalogue = _registry()
    catalogue[exercise.name] = _checked(exercise, set(catalogue))
    if notebook is not None:
        _NOTEBOOK_OF[exercise.name] = notebook
    return exercise


_LESSONS_REGISTERED = False  # whether every lesson's exercises are in _REGISTRY yet


def _registry() -> dict[str, Exercise]:
    """The catalogue, with every lesson's exercises (``labcore.course.lessons``: each folder's
    ``exercises.catalogue()``, in lesson order) added on first use rather than when this module is
    imported, so that a lesson module can import the framework whatever was imported before it.
    Every lesson exercise is checked before any is added, so a faulty one leaves the catalogue as
    it was and the next read raises the same error again."""
    global _LESSONS_REGISTERED
    if not _LESSONS_REGISTERED:
        from labcore.course import lessons

        found = [(exercise, lesson) for lesson in lessons.names()
                 for module in [lessons.part(lesson, "exercises")] if module is not None
                 for exercise in module.catalogue()]
        taken = set(_REGISTRY)
        for exercise, _ in found:
            taken.add(_checked(exercise, taken).name)
        _REGISTRY.update({exercise.name: exercise for exercise, _ in found})
        _NOTEBOOK_OF.update({exercise.name: lesson for exercise, lesson in found})
        _LESSONS_REGISTERED = True
    return _REGISTRY


def names() -> list[str]:
    """Every registered exercise name, in registration order: notebook order, and within a
    notebook the order it checks them in."""
    return list(_registry())


def get(name: str) -> Exercise:
    """The exercise called ``name``; a ValueError listing the known names otherwise."""
    try:
        return _registry()[name]
    except KeyError:
        raise ValueError(f"unknown exercise {name!r}; known exercises: {', '.join(names())}") from None


# ----------------------------------------------------------------------------------------------
# Comparing a learner's output with the reference's.


def _describe_value(value: Any) -> str:
    import jax

    if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
        return "a PRNG key"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a config: the fields it sets
        changed = [f"{field.name}={getattr(value, field.name)!r}" for field in dataclasses.fields(value)
                   if field.default is not dataclasses.MISSING and getattr(value, field.name) != field.default]
        return f"{type(value).__name__}({', '.join(changed)})"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"array{tuple(value.shape)} {value.dtype}"
    import jax.tree_util as jtu

    if callable(value) and not hasattr(value, "shape"):  # a function, or an optax transformation
        return getattr(value, "__name__", None) or type(value).__name__
    leaves = jtu.tree_leaves(value)
    if isinstance(value, dict | list | tuple) or (leaves and leaves[0] is not value):  # containers, dataclasses
        arrays = sum(hasattr(leaf, "shape") for leaf in leaves)
        return f"{type(value).__name__} pytree with {arrays} arrays" if arrays else f"a {type(value).__name__}"
    return repr(value)


def _describe_inputs(args: tuple) -> str:
    return ", ".join(_describe_value(a) for a in args)


def first_mismatch(got: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-6, equal_nan: bool = False) -> str | None:
    """None if ``got`` matches ``expected`` (same pytree structure, shapes, values within
    tolerance), else a sentence describing the first difference. equal_nan: a NaN matches a NaN (a wrong
    answer compared with a classic mistake that is wrong the same way)."""
    import jax.tree_util as jtu

    expected_paths, expected_def = jtu.tree_flatten_with_path(expected)
    got_leaves, got_def = jtu.tree_flatten(got)
    if got_def != expected_def:
        return f"the output's structure is {got_def}, but the reference returns {expected_def}"
    for (path, want), have in zip(expected_paths, got_leaves, strict=True):
        where = "output" + jtu.keystr(path)
        want, have = np.asarray(want), np.asarray(have)
        if have.shape != want.shape:
            return f"{where} has shape {have.shape}, but the reference's has shape {want.shape}"
        if have.dtype.kind != want.dtype.kind and not (have.dtype.kind in "fc" and want.dtype.kind in "fc"):
            return f"{where} has dtype {have.dtype}, but the reference's is {want.dtype}"
        close = np.isclose(have, want, rtol=rtol, atol=atol, equal_nan=equal_nan)
        if not np.all(close):
            index = tuple(int(i) for i in np.argwhere(~close)[0])
            at = f"{where}[{', '.join(map(str, index))}]" if index else where
            n_bad = int(np.size(close) - np.count_nonzero(close))
            return f"{at} = {have[index]!r}, but the reference gives {want[index]!r} ({n_bad} of {close.size} values differ)"
    return None


class AnswerProblem(ValueError):
    """Raised by an exercise's own wrapper around an answer (``run_with``) to say in words what is wrong
    with what the answer returned; ``check`` prints the message alone."""


def _explain_exception(err: BaseException) -> str:
    if isinstance(err, AnswerProblem):
        return str(err)
    last = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
    where = f" (line {last.lineno}: {last.line})" if last and last.line else ""
    message = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"it raised {type(err).__name__}: {message}{where}"


def check(
    name: str,
    learner_fn: Callable[..., Any],
    *,
    trials: int | None = None,
    seed: int | None = None,
    verbose: bool = True,
) -> bool:
    """Run ``learner_fn`` and the reference of exercise ``name`` on fresh random inputs.

    Prints a pass, or the first failure with the inputs it failed on, and
    returns whether every trial matched. A wrong answer, or one that raises,
    is reported and returns False; only an unknown exercise name raises.
    ``seed`` fixes the inputs (the failure message always says which seed).
    """
    import jax

    exercise = get(name)
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0])
    rng = np.random.default_rng(seed)
    n_trials = exercise.trials if trials is None else trials

    def report(ok: bool, message: str) -> bool:
        _RESULTS[name] = ok
        if verbose:
            print(message)
        return ok

    # Every comparison runs at full float32 matmul precision: TPUs (and TF32 on Ampere GPUs) would
    # otherwise round matmul inputs by default, so a right answer written without a matmul could
    # miss a reference written with one, and a plain float32 matmul could pass for a bfloat16 one.
    with jax.default_matmul_precision("highest"):
        return _run_trials(name, exercise, learner_fn, rng, seed, n_trials, report)


def _run_trials(name: str, exercise: Exercise, learner_fn: Callable[..., Any], rng: np.random.Generator,
                seed: int, n_trials: int, report: Callable[[bool, str], bool]) -> bool:
    import jax

    if exercise.judge is not None:
        return _run_judged_trials(name, exercise, learner_fn, rng, seed, n_trials, report)
    edges = [] if exercise.edge_inputs is None else list(exercise.edge_inputs(rng))
    n_trials += len(edges)
    for trial in range(n_trials):
        args = edges[trial] if trial < len(edges) else exercise.make_inputs(rng)
        expected = exercise.reference(*args)
        for how, fn in _ways_to_run(exercise, learner_fn):
            got = None
            try:
                got = jax.block_until_ready(fn(*args))
            except NotImplementedError:
                return report(False, _not_written(name, exercise))
            except Exception as err:  # noqa: BLE001 - the learner's code may raise anything
                problem = _explain_exception(err)
            else:
                problem = first_mismatch(got, expected, exercise.rtol, exercise.atol)
            if problem is not None:
                known = None if got is None else _matching_mistake(exercise, args, got)
                return report(
                    False,
                    f"FAIL  {name}: on input {trial + 1} of {n_trials}{how} (seed {seed}), {problem}.\n"
                    f"      inputs: {_describe_inputs(args)}"
                    + (f"\n      this is a classic mistake: {known}" if known else "")
                    + f"\n      {_ASK}".replace("{name}", name),
                )
    checked = " and under jax.jit" if exercise.jit else ""
    return report(True, f"PASS  {name}: matches the reference on {n_trials} random inputs{checked}.")


def _not_written(name: str, exercise: Exercise) -> str:
    """What check says of the notebook's stub (it raises NotImplementedError): the task, nothing given away."""
    task = exercise.description.splitlines()[0]
    return f"WRITE {name}: not written yet. {task}\n      {_ASK}".replace("{name}", name)


def _ways_to_run(exercise: Exercise, fn: Callable[..., Any]) -> list[tuple[str, Callable[..., Any]]]:
    """(how, function) pairs: ``fn`` under the exercise's ``run_with``, and jitted too for ``jit`` exercises."""
    import jax

    prepared = fn if exercise.run_with is None else exercise.run_with(fn)
    return [("", prepared)] + ([(" under jax.jit", jax.jit(prepared))] if exercise.jit else [])


def _judge(exercise: Exercise, fn: Callable[..., Any], rng: np.random.Generator) -> str | None:
    """The judge's verdict on ``fn``: None, or what is wrong (an exception raised is a fault too)."""
    try:
        return exercise.judge(fn, rng)
    except NotImplementedError:
        raise
    except Exception as err:  # noqa: BLE001 - the learner's code may raise anything
        return _explain_exception(err)


def _run_judged_trials(name: str, exercise: Exercise, learner_fn: Callable[..., Any], rng: np.random.Generator,
                       seed: int, n_trials: int, report: Callable[[bool, str], bool]) -> bool:
    for trial in range(n_trials):
        start = rng.bit_generator.state  # each way of running, and each mistake, meets the same inputs
        for index, (how, fn) in enumerate(_ways_to_run(exercise, learner_fn)):
            rng.bit_generator.state = start
            try:
                problem = _judge(exercise, fn, rng)
            except NotImplementedError:
                return report(False, _not_written(name, exercise))
            if problem is None:
                continue
            known = _judged_mistake(exercise, index, start, problem)
            return report(
                False,
                f"FAIL  {name}: on trial {trial + 1} of {n_trials}{how} (seed {seed}), {problem}."
                + (f"\n      this is a classic mistake: {known}" if known else "")
                + f"\n      {_ASK}".replace("{name}", name),
            )
    checked = " and under jax.jit" if exercise.jit else ""
    return report(True, f"PASS  {name}: behaves as it should in {n_trials} trials of random inputs{checked}.")


def _judged_mistake(exercise: Exercise, way: int, rng_state: dict, problem: str) -> str | None:
    """The label of the first classic mistake the judge finds the same fault in, run the same ``way``
    on the inputs drawn from ``rng_state``."""
    for label, wrong in exercise.mistakes:
        rng = np.random.default_rng()
        rng.bit_generator.state = rng_state
        if _judge(exercise, _ways_to_run(exercise, wrong)[way][1], rng) == problem:
            return label
    return None


# Hints and worked answers are on request, never printed unasked: the learner tries first.
_ASK = 'stuck? hint("{name}") gives a hint, solution("{name}") a worked answer (labcore.course.exercises).'


def hint(name: str) -> None:
    """Print the task of exercise ``name`` and its hint (what ``check`` does not print unasked)."""
    exercise = get(name)
    task, *rest = exercise.description.splitlines()
    text = " ".join(line.strip() for line in rest).strip() or "no hint beyond the task itself."
    print(f"{name}: {task}\nhint: {textwrap.fill(text, 96, subsequent_indent='      ')}")


def _matching_mistake(exercise: Exercise, args: tuple, got: Any) -> str | None:
    """The label of the first classic mistake whose output on ``args`` equals ``got``, if any."""
    import jax

    for label, wrong in exercise.mistakes:
        prepared = _ways_to_run(exercise, wrong)[0][1]
        try:
            theirs = jax.block_until_ready(prepared(*args))
        except Exception:  # noqa: BLE001 - a mistake that cannot even run says nothing here
            continue
        if first_mismatch(got, theirs, exercise.rtol, exercise.atol, equal_nan=True) is None:
            return label
    return None


def solution(name: str) -> Callable[..., Any]:
    """Show a worked answer to exercise ``name`` (its source, highlighted in a notebook) and return
    it, so that ``my_answer = solution("huber_loss")`` lets the lesson go on with a right one.

    The notebooks keep solutions out of sight under their exercises: try first, then ask.
    """
    from labcore.course.source import display, show_source

    exercise = get(name)
    if exercise.solution is None:
        raise ValueError(f"exercise {name!r} has no worked solution; its reference is {exercise.reference!r}")
    display(show_source(exercise.solution))
    return exercise.solution


def progress(notebook: str | None = None, verbose: bool = True) -> dict[str, str]:
    """Where the learner stands: each exercise's latest result in this Python process.

    Returns {name: 'passed' | 'failed' | 'not tried'} in notebook order, for every exercise or for
    those of ``notebook`` (a lesson folder's name such as 'nb01_haiku_dqn', or its number '01').
    verbose prints one line per notebook with its count, then each exercise. Results live in
    memory: a restarted kernel starts again from 'not tried'.
    """
    chosen = [
        name for name in names()
        if notebook is None or _NOTEBOOK_OF.get(name, "") == notebook or _NOTEBOOK_OF.get(name, "")[2:4] == notebook
    ]
    if notebook is not None and not chosen:
        known = sorted(set(_NOTEBOOK_OF.values()))
        raise ValueError(f"no exercises for notebook {notebook!r}; notebooks with exercises: {', '.join(known)}")
    states = {name: "not tried" if name not in _RESULTS else "passed" if _RESULTS[name] else "failed" for name in chosen}
    if verbose:
        for lesson in dict.fromkeys(_NOTEBOOK_OF.get(name, "other") for name in chosen):
            mine = [name for name in chosen if _NOTEBOOK_OF.get(name, "other") == lesson]
            done = sum(states[name] == "passed" for name in mine)
            print(f"{lesson}: {done} of {len(mine)} passed")
            for name in mine:
                mark = {"passed": "x", "failed": "!", "not tried": " "}[states[name]]
                print(f"  [{mark}] {name}")
    return states


# ----------------------------------------------------------------------------------------------
# Shared by the notebooks' input makers.


def jnp_f32(x: np.ndarray):
    """A float32 JAX array of ``x``."""
    import jax.numpy as jnp

    return jnp.asarray(x, dtype=jnp.float32)
