"""Profiling JAX programs: record a trace, read it back in Python, and see where memory lives.

    with profiling.trace("runs/profile"):                  # TensorBoard + Perfetto files
        jax.block_until_ready(train(key))
    t = profiling.read_trace("runs/profile")               # the newest run under that folder
    t.top_operations(5, where="device")                    # [OpTime('while.12', 180.3, 1, 0.4), ...]
    t.host_vs_device()                                     # {'host_ms': 2.1, 'device_ms': 190.0, 'wall_ms': 205.7}
    profiling.device_memory_profile().top(3)               # the largest live allocations
    profiling.compile_and_run_seconds(jax.jit(f), x)       # CompileAndRun(compile_s=0.41, run_s=0.003)

``trace`` writes what JAX's profiler writes: TensorBoard's profile-plugin layout,
``log_dir/plugins/profile/<run>/<host>.xplane.pb`` (open it with ``tensorboard --logdir
log_dir`` and the ``xprof`` plugin, or ``xprof log_dir``), the same events as a Chrome trace
``<host>.trace.json.gz``, and ``perfetto_trace.json.gz`` for https://ui.perfetto.dev.
``read_trace`` parses the Chrome trace, so a notebook can answer "what took the time?"
without leaving Python.

Which events are the device's. On a GPU or TPU the trace holds a process per accelerator
(``/device:GPU:0``, ``/device:TPU:0``), and its events are the device's: kernels, XLA ops and
modules. On the CPU there is no such process: everything is in ``/host:CPU``. XLA:CPU's
ops are the events that carry an ``hlo_op`` argument (with ``hlo_module``, the jitted
program, e.g. ``jit_train``); they run on the runtime's worker threads
(``tf_XLAPjRtCpuClient/...``, and the intra-op pool ``tf_XLAEigen/...``), and a small
program may run inline on the calling ``python`` thread. So on the CPU the
events fall in three kinds: "device", the ``hlo_op`` events (the compiled program's ops);
"runtime", the other events on the ``tf_XLA*`` threads (XLA:CPU's thunk executor starting
ops, waiting for them, marking their ends); and "host", the rest: the Python call stack
(events named ``$file.py:line function``), dispatch (``PjitFunction(train)``), argument
handling and transfers. On a GPU or TPU every event outside the ``/device:`` processes is
"host".

Also here, for one import in a notebook: the device memory profile (``device_memory_profile``,
``save_memory_profile``; defined in ``labcore.tools.memory_profile``), and the timing pitfalls:
``time_call(..., block=False)`` (from ``labcore.tools.benchmarking``) times dispatch instead of work,
and ``compile_and_run_seconds`` separates compiling from running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gzip
import json
import os
import pathlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from labcore import compile_cache
from labcore.tools.benchmarking import Timing, markdown_table, time_call
from labcore.tools.memory_profile import (
    Allocation,
    MemoryProfile,
    device_memory_profile,
    parse_memory_profile,
    save_memory_profile,
)

__all__ = [
    "Allocation",
    "CompileAndRun",
    "MemoryProfile",
    "OpTime",
    "Timing",
    "Trace",
    "TraceEvent",
    "compile_and_run_seconds",
    "device_memory_profile",
    "parse_memory_profile",
    "read_trace",
    "save_memory_profile",
    "time_call",
    "trace",
    "trace_file",
    "xplane_file",
]


PROFILE_SUBDIR = pathlib.Path("plugins") / "profile"  # TensorBoard's profile-plugin layout
PERFETTO_FILE = "perfetto_trace.json.gz"
CHROME_SUFFIX = ".trace.json.gz"
XPLANE_SUFFIX = ".xplane.pb"

# Host-side events that mean "waiting for the device" (blocking on a result, waiting for a
# buffer's holds, the thunk executor waiting for its ops): counting them as host work would
# make a blocked host look busy. host_vs_device leaves them out of the host's busy time.
_WAIT_WORDS = ("wait", "await", "block_until_ready")


@contextlib.contextmanager
def trace(
    log_dir: str | os.PathLike,
    *,
    create_perfetto_link: bool = False,
    profiler_options: Any = None,
) -> Iterator[pathlib.Path]:
    """Profile the ``with`` block: ``jax.profiler.trace(log_dir, create_perfetto_trace=True)``.

    Writes ``log_dir/plugins/profile/<run>/`` with ``<host>.xplane.pb`` (TensorBoard's profile
    plugin, xprof), ``<host>.trace.json.gz`` (Chrome trace) and ``perfetto_trace.json.gz``
    (Perfetto); ``<run>`` is named by the time, ``YYYY_MM_DD_HH_MM_SS``. Yields ``log_dir`` as a
    Path; read the result with ``read_trace(log_dir)`` after the block. Work dispatched inside
    the block but still running when it ends is cut off: end the block with
    ``jax.block_until_ready`` on the results.

    create_perfetto_link: also serve the trace to ui.perfetto.dev (blocks until it is opened).
    profiler_options: a ``jax.profiler.ProfileOptions`` (host/Python tracer levels).

    ``create_perfetto_trace`` and ``profiler_options`` are keywords of ``jax.profiler.trace`` in
    every jax labcore supports (0.7.2 to 0.10.2), with the same files written.
    """
    import jax

    log_dir = pathlib.Path(log_dir)
    with jax.profiler.trace(
        str(log_dir),
        create_perfetto_link=create_perfetto_link,
        create_perfetto_trace=True,
        profiler_options=profiler_options,
    ):
        yield log_dir


KINDS = ("device", "runtime", "host")


class TraceEvent(NamedTuple):
    """One complete ("X") event of a Chrome trace: a named span on one thread.

    ts_us, dur_us: start and duration in microseconds (the Chrome trace's unit), relative to
    the trace's start. process, thread: the names the trace's metadata events give pid and tid.
    args: the event's arguments (XLA:CPU ops carry ``hlo_op`` and ``hlo_module``).
    kind: "device", "runtime" or "host" (see the module docstring).
    """

    name: str
    ts_us: float
    dur_us: float
    pid: int
    tid: int
    process: str
    thread: str
    args: Mapping[str, Any]
    kind: str

    @property
    def end_us(self) -> float:
        return self.ts_us + self.dur_us


class OpTime(NamedTuple):
    """Time spent in events of one name (milliseconds).

    total_ms: inclusive time (an op's nested ops count towards it; a name nested inside
    itself on one thread is counted once). count: how many events had the name. self_ms:
    exclusive time, less the time of nested events on the same thread.
    """

    name: str
    total_ms: float
    count: int
    self_ms: float


def _is_wait(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _WAIT_WORDS)


def _is_python_frame(name: str) -> bool:
    # JAX's Python tracer names each frame "$file.py:line function"
    return name.startswith("$")


def _is_profiler_switch(name: str) -> bool:
    # jax.profiler's own start_trace/stop_trace frames (stop_trace exports the trace, which
    # takes longer than many a profiled block)
    return name.startswith("$profiler.py:") and name.endswith((" start_trace", " stop_trace"))


def _union_ms(spans: Sequence[tuple[float, float]]) -> float:
    """Milliseconds covered by at least one of the [start, end) spans (given in microseconds)."""
    covered, current_start, current_end = 0.0, 0.0, None
    for start, end in sorted(spans):
        if current_end is None or start > current_end:
            if current_end is not None:
                covered += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        covered += current_end - current_start
    return covered / 1000.0


def _drop_profiler_frames(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The complete events less the profiler's own start/stop: the Python frames of
    ``start_trace``/``stop_trace``, what ran inside them, and the frames enclosing them (the
    ``with`` statement's ``__enter__``/``__exit__`` and the context managers), so that the
    trace's span is the profiled block's."""
    switches = [(e["pid"], e.get("tid", 0), e["ts"], e["ts"] + e["dur"]) for e in events if _is_profiler_switch(e["name"])]

    def involved(e: dict[str, Any]) -> bool:
        start, end = e["ts"], e["ts"] + e.get("dur", 0.0)
        for pid, tid, s_start, s_end in switches:
            if (e["pid"], e.get("tid", 0)) != (pid, tid):
                continue
            # timestamps are float microseconds: allow a nanosecond of rounding
            inside = start >= s_start - 1e-3 and end <= s_end + 1e-3
            encloses = _is_python_frame(e["name"]) and start <= s_start + 1e-3 and end >= s_end - 1e-3
            if inside or encloses:
                return True
        return False

    return [e for e in events if not involved(e)] if switches else events


@dataclasses.dataclass(frozen=True)
class Trace:
    """The complete events of one profiled run, as ``read_trace`` parsed them.

    path: the trace file read. events: every complete event, ordered by thread, then start,
    less the profiler's own start/stop frames.
    """

    path: pathlib.Path
    events: tuple[TraceEvent, ...]

    @classmethod
    def from_chrome_trace(cls, data: Mapping[str, Any], path: str | os.PathLike = "") -> Trace:
        """Parse a Chrome trace (the dict in a ``trace.json``) into a Trace.

        Uses the ``M`` (metadata) events' ``process_name``/``thread_name`` to name pids and
        tids and keeps the ``X`` (complete) events; instants, counters and flows are dropped.
        """
        raw = data["traceEvents"]
        processes: dict[int, str] = {}
        threads: dict[tuple[int, int], str] = {}
        for event in raw:
            if event.get("ph") != "M":
                continue
            name = event.get("args", {}).get("name", "")
            if event.get("name") == "process_name":
                processes[event["pid"]] = name
            elif event.get("name") == "thread_name":
                threads[(event["pid"], event.get("tid", 0))] = name
        # A GPU/TPU trace has "/device:..." processes and only their events are the device's;
        # a CPU-only trace has none, and XLA:CPU's ops are told apart by their arguments.
        has_device_process = any(name.startswith("/device:") for name in processes.values())
        complete = _drop_profiler_frames([e for e in raw if e.get("ph") == "X" and "pid" in e and "ts" in e])
        events = []
        for event in complete:
            pid, tid = event["pid"], event.get("tid", 0)
            process = processes.get(pid, str(pid))
            thread = threads.get((pid, tid), str(tid))
            args = event.get("args", {})
            if has_device_process:
                kind = "device" if process.startswith("/device:") else "host"
            elif "hlo_op" in args:
                kind = "device"
            elif thread.startswith("tf_XLA"):
                kind = "runtime"
            else:
                kind = "host"
            name = event.get("name", "")
            events.append(TraceEvent(name, float(event["ts"]), float(event.get("dur", 0.0)), pid, tid, process, thread, args, kind))
        events.sort(key=lambda e: (e.pid, e.tid, e.ts_us, -e.dur_us))
        return cls(pathlib.Path(path), tuple(events))

    def _select(self, where: str | None) -> list[int]:
        if where is not None and where not in KINDS:
            raise ValueError(f"where must be one of {KINDS} or None, got {where!r}")
        return [i for i, e in enumerate(self.events) if where is None or e.kind == where]

    @functools.cached_property
    def _nesting(self) -> tuple[list[float], list[bool]]:
        """Per event: self time (us), and whether a same-named event on its thread encloses it."""
        self_us = [e.dur_us for e in self.events]
        inside_same_name = [False] * len(self.events)
        stack: list[int] = []  # indices of the open events on the current thread
        thread = None
        for i, event in enumerate(self.events):  # sorted by thread, then start, longest first
            if (event.pid, event.tid) != thread:
                stack, thread = [], (event.pid, event.tid)
            # the profiler rounds to nanoseconds: a child may overhang its parent by a hair
            while stack and self.events[stack[-1]].end_us <= event.ts_us + 1e-3:
                stack.pop()
            if stack:
                parent = self.events[stack[-1]]
                self_us[stack[-1]] -= min(event.end_us, parent.end_us) - event.ts_us
                inside_same_name[i] = any(self.events[j].name == event.name for j in stack)
            stack.append(i)
        return [max(s, 0.0) for s in self_us], inside_same_name

    def top_operations(self, n: int = 10, where: str | None = None, by: str = "total") -> list[OpTime]:
        """The ``n`` event names with the most time, as ``OpTime(name, total_ms, count, self_ms)``.

        where: "device" (XLA ops: fusions, dots, ``while`` loops from scans...), "host" (the
        Python call stack as ``$file.py:line function`` events, dispatch as
        ``PjitFunction(name)``, transfers), "runtime" (XLA:CPU's executor; CPU traces only), or
        None for all. by: "total" (inclusive time) or "self" (exclusive time) orders them.
        """
        if by not in ("total", "self"):
            raise ValueError(f"by must be 'total' or 'self', got {by!r}")
        self_us, inside_same_name = self._nesting
        totals: dict[str, list[float]] = {}
        for i in self._select(where):
            event = self.events[i]
            row = totals.setdefault(event.name, [0.0, 0, 0.0])
            if not inside_same_name[i]:
                row[0] += event.dur_us
            row[1] += 1
            row[2] += self_us[i]
        rows = [OpTime(name, total / 1000.0, int(count), own / 1000.0) for name, (total, count, own) in totals.items()]
        rows.sort(key=lambda r: (r.total_ms if by == "total" else r.self_ms), reverse=True)
        return rows[:n]

    def host_vs_device(self) -> dict[str, float]:
        """Busy time of the host and of the device, and the trace's span, in milliseconds.

        wall_ms: from the first event's start to the last event's end (the profiled block).
        device_ms: time during which at least one device event (an XLA op) ran; overlapping
        and nested events count once, so it is the device's busy time, <= wall_ms.
        host_ms: the same for host events, leaving out the Python call stack (its frames
        enclose everything the host does, waits included) and waits for the device
        (``...Await``, ``Wait for ...``, ``block_until_ready``): the time the host spent
        dispatching, preparing arguments and transferring, <= wall_ms. XLA:CPU's executor
        ("runtime" events) counts in neither. The two overlap when the host dispatches while
        the device computes.
        """
        if not self.events:
            return {"host_ms": 0.0, "device_ms": 0.0, "wall_ms": 0.0}
        start = min(e.ts_us for e in self.events)
        end = max(e.end_us for e in self.events)
        device = [(e.ts_us, e.end_us) for e in self.events if e.kind == "device"]
        host = [
            (e.ts_us, e.end_us)
            for e in self.events
            if e.kind == "host" and not _is_python_frame(e.name) and not _is_wait(e.name)
        ]
        return {"host_ms": _union_ms(host), "device_ms": _union_ms(device), "wall_ms": (end - start) / 1000.0}

    def threads(self) -> list[dict[str, Any]]:
        """One row per (process, thread): events, busy ms, and events of each kind; busiest first."""
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        spans: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for e in self.events:
            key = (e.process, e.thread)
            row = rows.setdefault(key, {"process": e.process, "thread": e.thread, "events": 0, **dict.fromkeys(KINDS, 0)})
            row["events"] += 1
            row[e.kind] += 1
            spans.setdefault(key, []).append((e.ts_us, e.end_us))
        for key, row in rows.items():
            row["busy_ms"] = _union_ms(spans[key])
        return sorted(rows.values(), key=lambda r: -r["busy_ms"])

    def table(self, n: int = 10, where: str | None = None, by: str = "total") -> str:
        """``top_operations`` as a markdown table (operation, total ms, self ms, count)."""
        rows = [
            {"operation": r.name, "total ms": r.total_ms, "self ms": r.self_ms, "count": r.count}
            for r in self.top_operations(n, where, by)
        ]
        return markdown_table(rows) if rows else f"(no {where or 'complete'} events)"

    def __repr__(self) -> str:
        # A run has hundreds of thousands of events: a notebook's text view (which Jupyter sends
        # beside the markdown one, and saves) gets one line, not every event.
        return f"Trace(path={str(self.path)!r}, events=<{len(self.events):,} events>)"

    def _repr_markdown_(self) -> str:
        split = self.host_vs_device()
        summary = (
            f"**{self.path}**: {len(self.events):,} events; wall {split['wall_ms']:.1f} ms, "
            f"device busy {split['device_ms']:.1f} ms, host busy {split['host_ms']:.1f} ms"
        )
        return "\n\n".join([summary, "Device", self.table(10, "device"), "Host", self.table(10, "host")])


def _newest_run(log_dir: pathlib.Path) -> pathlib.Path:
    runs_root = log_dir / PROFILE_SUBDIR
    runs = [p for p in runs_root.iterdir() if p.is_dir()] if runs_root.is_dir() else []
    if not runs:
        raise FileNotFoundError(f"no profile runs under {runs_root} (record one with labcore.tools.profiling.trace)")
    # run folders are named by their time, YYYY_MM_DD_HH_MM_SS, so the name orders them; the
    # modification time breaks ties (jax does the same to find the run it just wrote)
    return max(runs, key=lambda p: (p.name, p.stat().st_mtime))


def trace_file(log_dir: str | os.PathLike) -> pathlib.Path:
    """The Chrome trace of the newest run under ``log_dir`` (a trace's log_dir or one run's folder).

    Prefers ``perfetto_trace.json.gz``; falls back to ``<host>.trace.json.gz``, the file the
    profiler itself writes (the Perfetto file is a copy of it without its metadata).
    """
    path = pathlib.Path(log_dir)
    if path.is_file():
        return path
    run = path if (path / PERFETTO_FILE).exists() or any(path.glob(f"*{CHROME_SUFFIX}")) else _newest_run(path)
    if (run / PERFETTO_FILE).exists():
        return run / PERFETTO_FILE
    chrome = sorted(run.glob(f"*{CHROME_SUFFIX}"))
    if len(chrome) != 1:
        raise FileNotFoundError(f"expected {PERFETTO_FILE} or one *{CHROME_SUFFIX} in {run}, found {chrome}")
    return chrome[0]


def read_trace(log_dir: str | os.PathLike) -> Trace:
    """Parse the newest profiled run under ``log_dir`` (see ``trace_file``) into a ``Trace``."""
    path = trace_file(log_dir)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return Trace.from_chrome_trace(json.load(f), path)


def xplane_file(log_dir: str | os.PathLike) -> pathlib.Path:
    """The ``<host>.xplane.pb`` of the newest run under ``log_dir``: what TensorBoard/xprof open."""
    path = pathlib.Path(log_dir)
    run = path if any(path.glob(f"*{XPLANE_SUFFIX}")) else _newest_run(path)
    files = sorted(run.glob(f"*{XPLANE_SUFFIX}"))
    if not files:
        raise FileNotFoundError(f"no *{XPLANE_SUFFIX} in {run}")
    return files[0]


class CompileAndRun(NamedTuple):
    """compile_s: seconds to trace, lower and compile. run_s: seconds per call of the compiled
    executable (mean of ``repeats`` calls, each waited for)."""

    compile_s: float
    run_s: float


def compile_and_run_seconds(jitted_fn: Callable[..., Any], *args: Any, repeats: int = 3, **kwargs: Any) -> CompileAndRun:
    """Seconds to compile ``jitted_fn`` for these arguments, and seconds per run of the result.

    compile_s times ``jitted_fn.lower(*args).compile()`` from scratch: JAX's in-memory caches
    are cleared first (``jax.clear_caches()``; every jitted function recompiles on its next
    call) and the persistent compilation cache is switched off for the measurement. run_s is
    the mean of ``repeats`` calls of the compiled executable after one warm-up call, each
    waited for with ``jax.block_until_ready`` (with static arguments, calls of ``jitted_fn``,
    which run the same program).
    """
    import jax

    if not hasattr(jitted_fn, "lower"):
        raise TypeError("compile_and_run_seconds needs a jitted function (jax.jit(fn)), which has .lower()")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    # A compile answered from a cache is not a compile. lower().compile() of a function compiled
    # before in this process returns the in-memory executable in microseconds, and with the
    # persistent cache on (compile_cache.configure()) a program compiled in any earlier session is read
    # from disk: clear the first, switch the second off for the measurement.
    jax.clear_caches()
    with compile_cache.disabled():
        start = time.perf_counter()
        compiled = jitted_fn.lower(*args, **kwargs).compile()
        compile_s = time.perf_counter() - start
    try:
        jax.block_until_ready(compiled(*args, **kwargs))  # the warm-up call
        run, warmup = (lambda: compiled(*args, **kwargs)), 0
    except TypeError:
        # jit(..., static_argnums=...): the executable takes only the dynamic arguments, with the
        # static ones baked in; jit's own call finds the same program and sorts them out
        run, warmup = (lambda: jitted_fn(*args, **kwargs)), 1
    timing = time_call(run, warmup=warmup, repeats=repeats)
    return CompileAndRun(compile_s, sum(timing.times_s) / len(timing.times_s))
