"""``python -m labcore doctor``: is this machine ready for the lab, and how fast is it?

Prints the versions of the stack, the devices JAX sees, the persistent compilation cache (on or
off, where, how big; see labcore.compile_cache), and two measured
numbers: a jitted float32 matmul's rate in GFLOP/s (the machine's compute
ceiling for dense layers) and the speed-up that ``jax.jit`` gives a chain of
small element-wise operations (what fusing them into one kernel is worth).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import platform as _platform
from typing import Any

from labcore import compile_cache, devices
from labcore.tools.benchmarking import time_call

# Distribution names (as pip knows them) of everything the notebooks use.
STACK = (
    "labcore",
    "jax",
    "jaxlib",
    "flax",
    "dm-haiku",
    "optax",
    "chex",
    "distrax",
    "rlax",
    "gymnax",
    "gymnasium",
    "ale-py",
    "orbax-checkpoint",
    "torch",
    "numpy",
    "ray",
)


def stack_versions() -> dict[str, str]:
    """``{'python': '3.11.7', 'jax': '0.10.2', ...}``; 'not installed' for missing packages."""
    versions = {"python": _platform.python_version()}
    for dist in STACK:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


@dataclasses.dataclass(frozen=True)
class MatmulResult:
    n: int  # square matrix size
    seconds: float  # median time of one n x n @ n x n product
    gflops: float  # 2 n^3 / seconds / 1e9


def measure_matmul(n: int = 1024, repeats: int = 10) -> MatmulResult:
    """Rate of a jitted float32 ``[n, n] @ [n, n]`` on the default device."""
    import jax
    import jax.numpy as jnp

    if n < 1:
        raise ValueError(f"matmul size n must be >= 1, got {n}")
    key_a, key_b = jax.random.split(jax.random.key(0))
    a = jax.random.normal(key_a, (n, n), jnp.float32)
    b = jax.random.normal(key_b, (n, n), jnp.float32)
    matmul = jax.jit(jnp.matmul)
    seconds = time_call(matmul, a, b, warmup=2, repeats=repeats).median_s
    return MatmulResult(n=n, seconds=seconds, gflops=2 * n**3 / seconds / 1e9)


def elementwise_chain(x):
    """A dozen cheap element-wise operations: each is a separate kernel without jit."""
    import jax.numpy as jnp

    y = jnp.tanh(x) * 0.5 + 0.5
    y = y * jnp.exp(-(x**2)) + jnp.sin(3.0 * x)
    y = jnp.where(y > 0, y, 0.01 * y)
    return jnp.sum(y * y - x / 3.0)


@dataclasses.dataclass(frozen=True)
class JitSpeedupResult:
    size: int  # vector length
    eager_seconds: float  # median time, op by op
    jit_seconds: float  # median time, compiled and fused
    speedup: float  # eager / jit


def measure_jit_speedup(size: int = 1_000_000, repeats: int = 10) -> JitSpeedupResult:
    """Time ``elementwise_chain`` op by op and under ``jax.jit`` (compile excluded)."""
    import jax
    import jax.numpy as jnp

    if size < 1:
        raise ValueError(f"vector size must be >= 1, got {size}")
    x = jax.random.normal(jax.random.key(1), (size,), jnp.float32)
    eager = time_call(elementwise_chain, x, warmup=1, repeats=repeats).median_s
    jitted = time_call(jax.jit(elementwise_chain), x, warmup=2, repeats=repeats).median_s
    return JitSpeedupResult(size=size, eager_seconds=eager, jit_seconds=jitted, speedup=eager / jitted)


def run(matmul_n: int = 1024, vector_size: int = 1_000_000, as_json: bool = False) -> dict[str, Any]:
    """Collect versions, devices and both measurements; print them; return them as a dict."""
    versions = stack_versions()
    report = devices.report()
    matmul = measure_matmul(matmul_n)
    speedup = measure_jit_speedup(vector_size)
    result = {
        "versions": versions,
        "devices": report.as_dict(),
        "matmul": dataclasses.asdict(matmul),
        "jit_speedup": dataclasses.asdict(speedup),
        "compilation_cache": compile_cache.status(),
    }
    if as_json:
        print(json.dumps(result, indent=2))
        return result

    print("labcore doctor\n\n== versions")
    width = max(map(len, versions))
    for name, version in versions.items():
        print(f"{name:<{width}}  {version}")
    print("\n== devices")
    print(report)
    print("\n== micro-benchmark (median of repeated calls, compile excluded)")
    print(
        f"jitted float32 matmul {matmul.n}x{matmul.n}: {matmul.seconds * 1e3:.2f} ms "
        f"-> {matmul.gflops:.1f} GFLOP/s"
    )
    print(
        f"element-wise chain on {speedup.size:,} floats: op by op {speedup.eager_seconds * 1e3:.2f} ms, "
        f"jitted {speedup.jit_seconds * 1e3:.2f} ms -> jit speed-up {speedup.speedup:.1f}x"
    )
    cache = result["compilation_cache"]
    print("\n== persistent compilation cache")
    if cache["enabled"]:
        print(f"on: {cache['folder']} ({cache['entries']} entries, {cache['bytes'] / 2**20:.1f} MiB; {cache['reason']}); "
              f"{cache['off_switch']} turns it off")
    else:
        print(f"off: {cache['reason']}")
    missing = [name for name, v in versions.items() if v == "not installed" and name != "torch"]
    if missing:
        print(f"\nmissing packages: {', '.join(missing)} (run `make lab` or `pip install -r requirements.txt`)")
    return result
