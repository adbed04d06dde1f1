"""Notebook 11 (profiling): time a compiled call honestly, rank a trace's operations, read a curve from a run.

``time_compiled_call`` is judged on a simulated device (``SimulatedDevice``): a clock the learner's
function must read, and a "jitted" function whose first call compiles, whose every call returns as soon
as its work is queued, and whose result is ready only when the device has run it. So the checker knows
the true cost of a call exactly, with no real timing and no flakiness, and tells the classic mistakes
apart by the number they produce: the compile inside the timing, the calls not waited for.
"""

from __future__ import annotations

import numpy as np

from labcore.course.exercises.checking import Exercise
from labcore.tools import benchmarking

# ----------------------------------------------------------------------------------------------
# time_compiled_call: one warm-up call, then each timed call waited for


class SimulatedDevice:
    """A clock and a jitted function on a simulated device, in seconds of simulated time.

    ``fn(*args)``: the first call compiles (``compile_s``); every call takes ``dispatch_s`` to return,
    its work queued; the device runs the calls one after another, ``run_s`` each. ``fn`` returns a
    pending result whose ``block_until_ready()`` (what ``jax.block_until_ready`` calls) advances the
    clock to the moment the device finishes it. ``clock()`` reads the simulated time.
    """

    def __init__(self, compile_s: float, dispatch_s: float, run_s: float):
        self.compile_s, self.dispatch_s, self.run_s = compile_s, dispatch_s, run_s
        self.now = 0.0
        self.device_free_at = 0.0
        self.calls = 0

    def clock(self) -> float:
        return self.now

    def fn(self, *args) -> PendingResult:
        if self.calls == 0:
            self.now += self.compile_s
        self.calls += 1
        self.now += self.dispatch_s
        start = max(self.now, self.device_free_at)
        self.device_free_at = start + self.run_s
        return PendingResult(self, self.device_free_at)

    @property
    def call_cost_s(self) -> float:
        """What one call costs once compiled, waited for: dispatch, then the run."""
        return self.dispatch_s + self.run_s


class PendingResult:
    """The result of a simulated call: ready at ``ready_at``; waiting for it moves the clock there."""

    def __init__(self, device: SimulatedDevice, ready_at: float):
        self.device, self.ready_at = device, ready_at

    def block_until_ready(self) -> PendingResult:
        self.device.now = max(self.device.now, self.ready_at)
        return self

    def is_ready(self) -> bool:
        return self.device.now >= self.ready_at


def _simulated_inputs(rng: np.random.Generator) -> tuple[SimulatedDevice, int]:
    run_s = float(rng.uniform(0.01, 0.1))
    device = SimulatedDevice(compile_s=float(rng.uniform(2.0, 20.0)), dispatch_s=run_s * float(rng.uniform(0.01, 0.05)),
                             run_s=run_s)
    return device, int(rng.choice([1, 2, 5, 9]))


def _time_inputs(rng: np.random.Generator) -> tuple:
    device, repeats = _simulated_inputs(rng)
    return device.fn, (), repeats, device.clock


def _time_compiled_call_reference(fn, args, repeats, clock):
    return benchmarking.time_call(fn, *args, warmup=1, repeats=repeats, clock=clock).median_s


def time_compiled_call_solution(fn, args, repeats, clock):
    import jax

    jax.block_until_ready(fn(*args))  # warm up: trace and compile now, not inside the timing
    seconds = []
    for _ in range(repeats):
        start = clock()
        result = fn(*args)
        jax.block_until_ready(result)  # the call returns when the work is queued; wait for the work
        seconds.append(clock() - start)
    return float(np.median(seconds))


def time_compiled_call_no_warm_up(fn, args, repeats, clock):
    import jax

    seconds = []
    for _ in range(repeats):
        start = clock()
        jax.block_until_ready(fn(*args))
        seconds.append(clock() - start)
    return float(np.mean(seconds))


def time_compiled_call_not_waited(fn, args, repeats, clock):
    import jax

    jax.block_until_ready(fn(*args))
    seconds = []
    for _ in range(repeats):
        start = clock()
        fn(*args)  # returns as soon as the work is queued
        seconds.append(clock() - start)
    return float(np.median(seconds))


def time_compiled_call_whole_loop_once(fn, args, repeats, clock):
    import jax

    start = clock()
    for _ in range(repeats):
        jax.block_until_ready(fn(*args))
    return (clock() - start) / repeats  # the first call's compile shared out over the repeats


# Relative tolerance: timing `repeats` queued calls and waiting once at the end (a throughput measure)
# gives run_s + dispatch_s / repeats, a few percent under the per-call cost; that is a right answer too.
_TIME_RTOL = 0.05


def judge_time_compiled_call(time_compiled_call, rng: np.random.Generator) -> str | None:
    device, repeats = _simulated_inputs(rng)
    got = time_compiled_call(device.fn, (), repeats, device.clock)
    want = device.call_cost_s
    if not isinstance(got, int | float | np.floating) or not np.isfinite(got):
        return f"it returns {got!r}, not a number of seconds"
    if got > want * 10:
        return (f"it returns {got:.3g} s for a call that costs {want:.3g} s once compiled: the first call's "
                "compile is inside the timing")
    if got < want * 0.5:
        return (f"it returns {got:.3g} s for a call that costs {want:.3g} s: the calls are timed as they return, "
                "before their work is done (wait with jax.block_until_ready)")
    if abs(got - want) > _TIME_RTOL * want:
        return f"it returns {got:.4g} s for a call that costs {want:.4g} s once compiled"
    return None


# ----------------------------------------------------------------------------------------------
# top_operations: rank a trace's operations by their total time


def _trace_inputs(rng: np.random.Generator) -> tuple[list[str], np.ndarray, int]:
    kinds = ["fusion", "dot", "while", "reduce", "copy", "transpose", "scatter", "gather", "convolution",
             "select", "add", "exponential"]
    distinct = int(rng.integers(4, len(kinds) + 1))
    chosen = [str(name) for name in rng.choice(kinds, size=distinct, replace=False)]
    count = int(rng.integers(distinct * 2, distinct * 6))
    # Every operation occurs at least once; the counts and durations differ, so that the most frequent
    # operation, the longest single event and the largest total are different operations.
    names = chosen + [str(name) for name in rng.choice(chosen, size=count - distinct)]
    rng.shuffle(names)
    durations_us = rng.exponential(50.0, size=count) * rng.uniform(0.2, 5.0, size=count)
    return names, durations_us.astype(np.float64), int(rng.integers(2, distinct))


def _top_operations_reference(names, durations_us, k):
    totals: dict[str, float] = {}
    for name, duration in zip(names, durations_us, strict=True):
        totals[name] = totals.get(name, 0.0) + float(duration)
    return dict(sorted(totals.items(), key=lambda item: -item[1])[:k])


def top_operations_solution(names, durations_us, k):
    from collections import defaultdict

    total = defaultdict(float)
    for name, duration in zip(names, durations_us):
        total[name] += float(duration)  # an operation runs many times: add up all its events
    ranked = sorted(total, key=total.get, reverse=True)
    return {name: total[name] for name in ranked[:k]}


def top_operations_longest_events(names, durations_us, k):
    longest: dict[str, float] = {}
    for name, duration in zip(names, durations_us, strict=True):
        longest[name] = max(longest.get(name, 0.0), float(duration))
    return dict(sorted(longest.items(), key=lambda item: -item[1])[:k])


def top_operations_most_frequent(names, durations_us, k):
    totals = _top_operations_reference(names, durations_us, len(names))
    counts = {name: names.count(name) for name in totals}
    ranked = sorted(counts, key=lambda name: -counts[name])[:k]
    return {name: totals[name] for name in ranked}


def top_operations_smallest(names, durations_us, k):
    totals = _top_operations_reference(names, durations_us, len(names))
    return dict(sorted(totals.items(), key=lambda item: item[1])[:k])


# ----------------------------------------------------------------------------------------------
# metric_curve: a training curve from a run's metrics rows


def _rows_inputs(rng: np.random.Generator) -> tuple[list[dict], str]:
    rows = []
    update = int(rng.integers(1, 20))
    stride = int(rng.integers(2, 11))
    first_episode = int(rng.integers(1, 5))
    for index in range(int(rng.integers(8, 30))):
        done = index >= first_episode and rng.uniform() < 0.8  # rows before the first finished episode have none
        rows.append({"update": update, "timesteps": update * 512, "loss": float(rng.normal()),
                     "episode_return": float(rng.uniform(5, 500)) if done else None})
        update += stride
    return rows, "episode_return"


def _metric_curve_reference(rows, tag):
    kept = [row for row in rows if row.get(tag) is not None]
    return (np.asarray([row["update"] for row in kept], np.int64),
            np.asarray([row[tag] for row in kept], np.float64))


def metric_curve_solution(rows, tag):
    steps, values = [], []
    for row in rows:
        if row.get(tag) is None:  # this update saw no finished episode: no point, not a zero
            continue
        steps.append(row["update"])  # the run's own step, as TensorBoard plots it
        values.append(row[tag])
    return np.array(steps, dtype=np.int64), np.array(values, dtype=np.float64)


def metric_curve_row_index(rows, tag):
    kept = [(index, row[tag]) for index, row in enumerate(rows) if row.get(tag) is not None]
    return np.asarray([i for i, _ in kept], np.int64), np.asarray([v for _, v in kept], np.float64)


def metric_curve_none_as_zero(rows, tag):
    return (np.asarray([row["update"] for row in rows], np.int64),
            np.asarray([0.0 if row.get(tag) is None else row[tag] for row in rows], np.float64))


def metric_curve_timesteps(rows, tag):
    kept = [row for row in rows if row.get(tag) is not None]
    return (np.asarray([row["timesteps"] for row in kept], np.int64),
            np.asarray([row[tag] for row in kept], np.float64))


def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""
    return [
        Exercise(
            name="time_compiled_call",
            description="The median time of one compiled call: (fn, args, repeats, clock) -> seconds, where fn is a "
            "jitted function, args its arguments, and clock() reads the time (use it where you would call "
            "time.perf_counter()).\n"
            "Call fn(*args) once and wait for it before timing (the first call traces and compiles). Then, "
            "repeats times: read the clock, call fn(*args), wait for the result with jax.block_until_ready (a "
            "jitted call returns as soon as its work is queued), read the clock again. Return the median. The "
            "checker runs your function on a simulated device that knows what a call costs.",
            reference=_time_compiled_call_reference,
            make_inputs=_time_inputs,
            judge=judge_time_compiled_call,
            solution=time_compiled_call_solution,
            mistakes=(
                ("no warm-up: the first call's compile is timed with the calls", time_compiled_call_no_warm_up),
                ("the calls not waited for: the time until the work is queued, not until it is done",
                 time_compiled_call_not_waited),
                ("the whole loop timed once, the compile included, divided by the repeats",
                 time_compiled_call_whole_loop_once),
            ),
        ),
        Exercise(
            name="top_operations",
            description="The k operations that took the most time in a trace: (names, durations_us, k) -> "
            "{name: total microseconds} of the k largest totals. names [N] is each event's operation, "
            "durations_us [N] its duration; an operation runs many times.\n"
            "Add up the durations of all the events of each operation, then keep the k largest totals (what "
            "profiling.Trace.top_operations does with a real trace).",
            reference=_top_operations_reference,
            make_inputs=_trace_inputs,
            solution=top_operations_solution,
            mistakes=(
                ("ranked by the longest single event, not by the total over all events", top_operations_longest_events),
                ("ranked by how often an operation ran, not by its time", top_operations_most_frequent),
                ("the k smallest totals: sorted the wrong way round", top_operations_smallest),
            ),
        ),
        Exercise(
            name="metric_curve",
            description="A training curve from a run's metrics rows: (rows, tag) -> (steps int64 [n], values "
            "float64 [n]). rows are the dicts of metrics.jsonl in order, each with the run's step under "
            "'update'; a row whose tag is None has no value (e.g. no episode ended in that update).\n"
            "Keep the rows whose tag is not None; steps are their 'update' values (the step TensorBoard plots "
            "the scalar at), values their tag. A missing value is no point, not a zero.",
            reference=_metric_curve_reference,
            make_inputs=_rows_inputs,
            rtol=0.0,
            atol=0.0,
            solution=metric_curve_solution,
            mistakes=(
                ("the row's index as the step, not the run's own step: the curve is squeezed and shifted",
                 metric_curve_row_index),
                ("rows without a value plotted as 0: a curve that drops to zero between episodes",
                 metric_curve_none_as_zero),
                ("env steps ('timesteps') as the step, where the run logs its scalars by update",
                 metric_curve_timesteps),
            ),
        ),
    ]
