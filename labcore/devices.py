"""Where are we running? Platform, devices, Colab and host memory.

Every notebook and the ``python -m labcore doctor`` command ask this module
rather than probing JAX themselves, so that platform quirks live in one place.

    >>> from labcore import devices
    >>> devices.platform()              # 'cpu', 'gpu' or 'tpu'
    >>> print(devices.report())         # everything below, printable
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any


def in_colab() -> bool:
    """True inside a Google Colab runtime (its kernel preloads ``google.colab``)."""
    return "google.colab" in sys.modules


def host_memory_bytes() -> int | None:
    """Total physical memory of this host in bytes, or None where the OS won't say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def cpu_count() -> int:
    """Cores this process may use (respects CPU affinity / container limits on Linux)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def synchronous_cpu_dispatch() -> bool:
    """Make JAX run CPU computations on the calling thread instead of a worker thread.

    By default a jitted call on the CPU returns at once and runs on another thread; reading
    the result waits for it. That pays off when Python has other work to overlap, but a host
    loop that steps a gymnasium env and needs each action before the next step (DQN's
    ``dqn_loop.train``) pays a thread hand-off per call instead: on a 2-core machine about
    80 us per acted step, a third of a CartPole step. Synchronous dispatch removes it. It only
    affects the CPU backend (GPU and TPU calls stay asynchronous) and must run before JAX
    first uses the CPU backend, like ``XLA_FLAGS``.

    Returns True if the setting will take effect, False (with a warning) if the CPU backend
    was already initialised in this process, in which case restart the kernel and call it first.
    """
    import warnings

    import jax

    jax.config.update("jax_cpu_enable_async_dispatch", False)
    try:
        from jax._src import xla_bridge  # no public way to ask whether a backend exists yet

        initialised = xla_bridge.backends_are_initialized()
    except (ImportError, AttributeError):
        return True
    if initialised:
        warnings.warn("synchronous_cpu_dispatch() came after JAX initialised its backends and has no effect "
                      "until the process restarts; call it before the first JAX computation", stacklevel=2)
        return False
    return True


def platform() -> str:
    """The default JAX backend's platform: ``'cpu'``, ``'gpu'`` or ``'tpu'``.

    JAX calls NVIDIA and AMD backends ``cuda``/``rocm`` in some places and
    ``gpu`` in others; this always answers ``'gpu'`` for either.
    """
    import jax

    name = jax.default_backend()
    return "gpu" if name in ("cuda", "rocm", "gpu") else name


def launch_bound() -> bool:
    """Whether the default backend is a GPU, where a compiled program's small steps cost their
    launches rather than their arithmetic.

    XLA runs a GPU program as kernels launched from the host: every small operation costs a launch
    of a few microseconds, and every ``lax.cond`` predicate and ``lax.while_loop`` test with a
    data-dependent trip count is copied back to the host, which waits for the device before it
    launches what follows (a scan of fixed length is not). Programs that run one step after another
    therefore choose, where the arithmetic is the same, the form with fewer writes and no such
    branch on a GPU, and the cheaper arithmetic elsewhere: ``labcore.packing.scan``,
    ``labcore.truncation.final_values`` and ``labcore.logged_scan.scan_updates``. Inside
    ``compiling_for(platform)`` it answers for that platform instead.
    """
    return target_platform() == "gpu"


def target_platform() -> str:
    """The platform programs are traced for: ``platform()``, or inside ``compiling_for(p)``, ``p``."""
    return platform() if _compiling_for is None else _compiling_for


_compiling_for: str | None = None  # set by compiling_for()


@contextlib.contextmanager
def compiling_for(target_platform: str) -> Iterator[None]:
    """Trace programs in the form they take on ``target_platform`` ('cpu', 'gpu', 'tpu'), whatever
    device this process runs on: for compiling a program for another device
    (``labcore.tools.gpu_program.compile_for_gpu``)."""
    global _compiling_for
    if target_platform not in ("cpu", "gpu", "tpu"):
        raise ValueError(f"target_platform: 'cpu', 'gpu' or 'tpu', got {target_platform!r}")
    before, _compiling_for = _compiling_for, target_platform
    try:
        yield
    finally:
        _compiling_for = before


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """One JAX device as the user sees it."""

    id: int
    platform: str
    kind: str  # e.g. 'cpu', 'NVIDIA T4', 'TPU v5 lite'
    process_index: int
    memory_bytes: int | None  # accelerator memory limit; None on the CPU


@dataclasses.dataclass(frozen=True)
class DeviceReport:
    """A snapshot of the machine JAX runs on."""

    platform: str
    devices: tuple[DeviceInfo, ...]
    local_device_count: int
    process_index: int
    process_count: int
    in_colab: bool
    host_memory_bytes: int | None
    cpu_count: int

    @property
    def device_count(self) -> int:
        return len(self.devices)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"device_count": self.device_count}

    def __str__(self) -> str:
        kinds = sorted({d.kind for d in self.devices})
        lines = [
            f"platform        {self.platform}",
            f"devices         {self.device_count} ({', '.join(kinds)}), {self.local_device_count} local",
            f"processes       {self.process_count} (this is process {self.process_index})",
            f"colab           {'yes' if self.in_colab else 'no'}",
            f"host memory     {format_bytes(self.host_memory_bytes)}",
            f"host cpu cores  {self.cpu_count}",
        ]
        accel_memory = [d.memory_bytes for d in self.devices if d.memory_bytes]
        if accel_memory:
            lines.append(f"device memory   {format_bytes(min(accel_memory))} per device")
        return "\n".join(lines)


def _device_memory(device: Any) -> int | None:
    # memory_stats() is None or raises on the CPU backend; on GPU/TPU it has bytes_limit.
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - backends differ in how they refuse
        return None
    return int(stats["bytes_limit"]) if stats and "bytes_limit" in stats else None


def report() -> DeviceReport:
    """Describe the current JAX platform, its devices, Colab and host resources."""
    import jax

    devices = tuple(
        DeviceInfo(
            id=d.id,
            platform=d.platform,
            kind=d.device_kind,
            process_index=d.process_index,
            memory_bytes=_device_memory(d),
        )
        for d in jax.devices()
    )
    return DeviceReport(
        platform=platform(),
        devices=devices,
        local_device_count=jax.local_device_count(),
        process_index=jax.process_index(),
        process_count=jax.process_count(),
        in_colab=in_colab(),
        host_memory_bytes=host_memory_bytes(),
        cpu_count=cpu_count(),
    )


def format_bytes(n: int | None) -> str:
    """``17179869184 -> '16.0 GiB'``; None -> 'unknown'."""
    if n is None:
        return "unknown"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    raise AssertionError("unreachable")


# NVIDIA GPUs older than Ampere (compute capability < 8.0) have no TF32 units; newer ones do,
# and XLA uses them for float32 matmuls unless told otherwise.
_PRE_AMPERE = ("T4", "V100", "P100", "P40", "P4", "K80", "K40", "M60", "M40", "TITAN V", "TITAN X", "GTX", "RTX 20",
               "QUADRO")


def default_matmul_precision(info: DeviceReport | None = None) -> str:
    """What a plain float32 matmul (``x @ w``, ``jnp.dot``, a Dense layer) does on this platform.

    Returns one of:

    - ``'float32'``: full float32 products (the CPU; NVIDIA GPUs before Ampere, such as
      Colab's T4, which is Turing; or any device once the precision is set to ``'highest'``);
    - ``'tf32'``: inputs rounded to TensorFloat-32 (10 mantissa bits), float32 accumulation,
      the default on NVIDIA Ampere and newer (A100, L4, H100);
    - ``'bfloat16'``: inputs rounded to bfloat16 (7 mantissa bits) in one pass, float32
      accumulation, the TPU default;
    - ``'bfloat16_3x'``: three bfloat16 passes (about float32 accuracy), TPU under ``'high'``.

    Derived from ``jax.config.jax_default_matmul_precision`` (None unless set, e.g. by
    ``jax.config.update("jax_default_matmul_precision", "highest")`` or inside a
    ``with jax.default_matmul_precision("highest"):`` block) and the device kind of ``info``
    (default: this machine). ``matmul_error`` measures the effect.
    """
    import jax

    info = report() if info is None else info
    setting = jax.config.jax_default_matmul_precision
    setting = None if setting is None else str(setting).lower()
    if setting in ("highest", "float32", "f32_f32_f32") or info.platform == "cpu":
        return "float32"
    if info.platform == "tpu":
        return "bfloat16_3x" if setting in ("high", "bfloat16_3x", "bf16_bf16_f32_x3") else "bfloat16"
    if info.platform == "gpu":
        kinds = [d.kind.upper() for d in info.devices]
        nvidia = any("NVIDIA" in kind or "TESLA" in kind or "QUADRO" in kind for kind in kinds)
        old = any(any(name in kind for name in _PRE_AMPERE) for kind in kinds)
        if not nvidia or old:
            return "float32"
        return "bfloat16" if setting in ("bfloat16", "fastest") else "tf32"
    return "float32"


def matmul_error(precision: str | None = None, n: int = 256, seed: int = 0) -> float:
    """Max abs error of an [n, n] float32 matmul on the default device against float64 numpy.

    precision: None (the platform's default, see ``default_matmul_precision``) or a
    ``jax.default_matmul_precision`` value such as ``'highest'``. Inputs are standard normal,
    so entries of the product are about sqrt(n) in size: full float32 gives errors near
    1e-5 at n = 256, TF32 near 1e-2, one bfloat16 pass near 1e-1.
    """
    import contextlib

    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    context = contextlib.nullcontext() if precision is None else jax.default_matmul_precision(precision)
    with context:
        product = jax.jit(jnp.matmul)(jnp.asarray(a), jnp.asarray(b))  # compiled under the precision in force
    return float(np.max(np.abs(np.asarray(product, np.float64) - exact)))


# Device classes: what auto_tune sizes a config for. A T4 reports about 15 GiB.
DEVICE_CLASSES = ("cpu", "gpu-small", "gpu-t4", "gpu", "tpu")
SMALL_GPU_BYTES = 16 * 1024**3
TINY_GPU_BYTES = 8 * 1024**3


def device_class(info: DeviceReport | None = None) -> str:
    """'cpu', 'tpu', 'gpu' (large), 'gpu-t4' (<= 16 GiB) or 'gpu-small' (<= 8 GiB)."""
    info = report() if info is None else info
    if info.platform != "gpu":
        return info.platform
    memory = min((d.memory_bytes for d in info.devices if d.memory_bytes), default=None)
    if memory is None or memory > SMALL_GPU_BYTES:
        return "gpu"
    return "gpu-small" if memory <= TINY_GPU_BYTES else "gpu-t4"


@dataclasses.dataclass(frozen=True)
class DeviceSizes:
    """The largest sizes one algorithm's config should run with on each device class.

    Each algorithm's config class declares its own as a class attribute ``DEVICE_SIZES``
    (this module knows no algorithm). ``limits[device_class]`` maps:

    - a field to its ceiling: ``{"hidden_size": 128}``; for a tuple of layer widths the ceiling
      applies to every layer;
    - a tuple of fields to a tuple of ceilings, for sizes that only matter as a product (PPO's
      batch, ``num_envs * num_steps``): the fields shrink in the order given, each to its ceiling,
      and only while the product is above the ceilings' product.

    ``divides`` keeps derived constraints valid: ``{"num_minibatches": ("num_envs", "num_steps")}``
    means num_minibatches must divide num_envs * num_steps; after shrinking it becomes the
    largest divisor at or below its value.
    """

    limits: Mapping[str, Mapping[Any, Any]]
    divides: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [kind for kind in DEVICE_CLASSES if kind not in self.limits]
        unknown = [kind for kind in self.limits if kind not in DEVICE_CLASSES]
        if missing or unknown:
            raise ValueError(f"DeviceSizes.limits must have exactly the device classes {DEVICE_CLASSES}; "
                             f"missing {missing}, unknown {unknown}")

    def fields(self) -> set[str]:
        """Every config field these sizes can change."""
        names = set(self.divides)
        for sizes in self.limits.values():
            for key in sizes:
                names.update(key if isinstance(key, tuple) else (key,))
        return names


def device_sizes(config: Any) -> DeviceSizes:
    """The ``DEVICE_SIZES`` table of a config's class; a TypeError naming the class if it has none."""
    sizes = getattr(type(config), "DEVICE_SIZES", None)
    if not isinstance(sizes, DeviceSizes):
        raise TypeError(f"auto_tune: {type(config).__name__} declares no DEVICE_SIZES (a labcore.devices.DeviceSizes "
                        "class attribute), so there is nothing to fit it to a device with")
    return sizes


def _capped(value: Any, ceiling: int) -> Any:
    if isinstance(value, tuple):  # layer widths: every layer at most the ceiling
        return tuple(min(int(width), ceiling) for width in value)
    return min(value, ceiling)


def auto_tune(config: Any, info: DeviceReport | None = None) -> tuple[Any, list[str]]:
    """Fit an algorithm's config to this device: returns (new config, one line per change).

    Works for any config whose class declares ``DEVICE_SIZES`` (DQNConfig, PPOConfig, PQNConfig,
    IQNConfig, IQNRunConfig, GFlowNetConfig). Only shrinks: a size already at or below the device's is left
    alone, so a small config you chose stays yours. Derived constraints declared in
    ``DEVICE_SIZES.divides`` are kept (PPO's num_minibatches still divides the batch), and the
    config's own validation runs again on the result (``dataclasses.replace``).

    ``info`` defaults to this machine's ``report()``; pass another to see what a T4 or a TPU
    would get.
    """
    sizes = device_sizes(config)
    kind = device_class(info)
    changes: dict[str, Any] = {}

    def current(field: str) -> Any:
        return changes.get(field, getattr(config, field))

    for key, ceiling in sizes.limits[kind].items():
        if isinstance(key, tuple):
            product = lambda values: math.prod(values)  # noqa: E731
            if product(current(f) for f in key) <= product(ceiling):
                continue
            for field, field_ceiling in zip(key, ceiling, strict=True):
                if product(current(f) for f in key) <= product(ceiling):
                    break
                if current(field) > field_ceiling:
                    changes[field] = field_ceiling
        else:
            new = _capped(current(key), ceiling)
            if new != current(key):
                changes[key] = new
    if not changes:
        return config, []
    for field, of in sizes.divides.items():
        total, count = math.prod(current(f) for f in of), current(field)
        while total % count:
            count -= 1
        if count != getattr(config, field):
            changes[field] = count
    lines = [f"{field}: {getattr(config, field)} -> {value} ({kind})" for field, value in changes.items()]
    return dataclasses.replace(config, **changes), lines
