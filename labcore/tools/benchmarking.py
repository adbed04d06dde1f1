"""Timing JAX code correctly, and reporting benchmark results.

JAX dispatches work asynchronously: a call returns as soon as the work is
queued, so timing it without waiting measures the queueing, not the compute.
And the first call of a jitted function includes tracing and compilation.
``time_call`` handles both (warm-up calls, then ``jax.block_until_ready`` on
every result), ``matmul_rate`` measures the device's matmul speed (the floor
that compute-bound code is compared with), and the files in ``benchmarks/``
report through ``markdown_table`` and ``write_results``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import platform as _platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of repeated calls, after warm-up."""

    times_s: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def min_s(self) -> float:
        return min(self.times_s)


def time_call(
    fn: Callable[..., Any],
    *args: Any,
    warmup: int = 1,
    repeats: int = 5,
    block: bool = True,
    clock: Callable[[], float] = time.perf_counter,
    **kwargs: Any,
) -> Timing:
    """Time ``fn(*args, **kwargs)``: ``warmup`` untimed calls, then ``repeats`` timed ones.

    Each call's result is waited for with ``jax.block_until_ready`` (which
    accepts any pytree and passes non-JAX values through), so the time covers the
    computation and not just its dispatch. ``block=False`` shows the classic mistake:
    the clock stops when ``fn`` returns, which under asynchronous dispatch is when the
    work is queued, not done (the result is still waited for, outside the timed span, so
    that the next call does not queue behind it). ``clock`` reads the time in seconds (a
    simulated device's clock in lesson 11's exercise checker).
    """
    import jax

    if warmup < 0 or repeats < 1:
        raise ValueError(f"need warmup >= 0 and repeats >= 1, got warmup={warmup}, repeats={repeats}")
    for _ in range(warmup):
        jax.block_until_ready(fn(*args, **kwargs))
    times = []
    for _ in range(repeats):
        start = clock()
        result = fn(*args, **kwargs)
        if block:
            jax.block_until_ready(result)
        times.append(clock() - start)
        jax.block_until_ready(result)
    return Timing(tuple(times))


def matmul_rate(m: int, k: int, n: int, repeats: int = 20) -> float:
    """GFLOP/s of a jitted float32 ``[m, k] @ [k, n]`` on the default device (median of ``repeats`` calls).

    The rate is measured at the matmul precision in force when it is called
    (``jax.default_matmul_precision``), so a floor computed from it matches code timed
    under the same setting.
    """
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (m, k), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (k, n), jnp.float32)
    seconds = time_call(jax.jit(jnp.matmul), a, b, warmup=3, repeats=repeats).median_s
    return 2 * m * k * n / seconds / 1e9


def _format_cell(value: Any) -> str:
    if value is None:  # not measured for this row
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, float):
        if value == 0 or 1e-3 <= abs(value) < 1e6:
            return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
        return f"{value:.3e}"
    return str(value)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Render dict rows as a GitHub markdown table (columns default to the first row's keys)."""
    if not rows:
        raise ValueError("markdown_table needs at least one row")
    columns = list(columns or rows[0].keys())
    header = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(_format_cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join([header, rule, *body])


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what ``platform`` knows."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return _platform.processor() or _platform.machine()


def machine_description() -> dict[str, Any]:
    """What a benchmark ran on: enough to tell whether two results are comparable. ``label`` says it in one
    line, as the results pages name a machine: "AMD EPYC (x86_64), 2 CPU cores, no accelerator"."""
    import jax

    from labcore import devices

    accelerator = ("no accelerator" if devices.platform() == "cpu"
                   else f"{jax.device_count()} x {jax.devices()[0].device_kind}")
    return {
        "label": f"{cpu_model()} ({_platform.machine()}), {devices.cpu_count()} CPU cores, {accelerator}",
        "python": _platform.python_version(),
        "jax": jax.__version__,
        "platform": devices.platform(),
        "device_kind": jax.devices()[0].device_kind,
        "device_count": jax.device_count(),
        "cpu_count": devices.cpu_count(),
        "processor": _platform.processor() or _platform.machine(),
    }


def write_results(
    name: str,
    rows: Sequence[dict[str, Any]],
    out_dir: str | pathlib.Path = "benchmarks/results",
    columns: Sequence[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> pathlib.Path:
    """Write ``{out_dir}/{name}.json`` (rows + machine + extra), print the markdown table.

    Returns the JSON path.
    """
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    payload = {
        "benchmark": name,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_description(),
        "rows": list(rows),
        **(extra or {}),
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(markdown_table(rows, columns))
    print(f"\nwrote {path}")
    return path
