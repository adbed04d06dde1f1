"""Where are we running? Platform, devices, Colab and host memory.

Every notebook and the ``python -m labcore doctor`` command ask this module
rather than probing JAX themselves, so that platform quirks live in one place.

    >>> from labcore import devices
    >>> devices.platform()              # 'cpu', 'gpu' or 'tpu'
    >>> print(devices.report())         # everything below, printable
"""

from __future__ import annotations

import dataclasses
import os
import sys
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


# Per-device sizes for on-policy training (PPOConfig's num_envs / num_steps / hidden_size).
# The seed's Colab findings: on a T4 (15 GB) the default 256 envs x 128 steps x 256 units ran
# out of memory while compiling; 64 x 128 x 256 fits, and 32 x 64 x 128 is the fallback for
# smaller GPUs. On a CPU the network's matmuls are the cost (about 6.5 MFLOP per step at
# 256 units), so a few cores want a smaller batch and network to keep updates frequent.
SMALL_GPU_BYTES = 16 * 1024**3  # a T4 reports about 15 GiB
TINY_GPU_BYTES = 8 * 1024**3
TUNING = {
    "tpu": {},  # the seed's settings fit: 16+ GiB of HBM per core
    "gpu": {},  # a large GPU (A100, H100): the seed's settings
    "gpu-t4": {"num_envs": 64, "num_steps": 128, "hidden_size": 256},
    "gpu-small": {"num_envs": 32, "num_steps": 64, "hidden_size": 128},
    "cpu": {"num_envs": 64, "num_steps": 128, "hidden_size": 128},
}


def device_class(info: DeviceReport | None = None) -> str:
    """'cpu', 'tpu', 'gpu' (large), 'gpu-t4' (<= 16 GiB) or 'gpu-small' (<= 8 GiB)."""
    info = report() if info is None else info
    if info.platform != "gpu":
        return info.platform
    memory = min((d.memory_bytes for d in info.devices if d.memory_bytes), default=None)
    if memory is None or memory > SMALL_GPU_BYTES:
        return "gpu"
    return "gpu-small" if memory <= TINY_GPU_BYTES else "gpu-t4"


def auto_tune(config: Any, info: DeviceReport | None = None) -> tuple[Any, list[str]]:
    """Fit an on-policy config to this device: returns (new config, one line per change).

    Only shrinks: a network or batch already at or below the device's size is left alone, so
    a small config you chose stays yours. ``num_minibatches`` is kept when it still divides the new
    batch, otherwise the largest divisor at or below it is used. The config's own validation
    runs again on the result (``dataclasses.replace``).
    """
    kind = device_class(info)
    sizes = TUNING[kind]
    changes: dict[str, Any] = {}
    if "hidden_size" in sizes and config.hidden_size > sizes["hidden_size"]:
        changes["hidden_size"] = sizes["hidden_size"]
    # The batch (num_envs x num_steps) is what fills memory: shrink envs first, then the
    # rollout length, and only while the batch is above the device's.
    if "num_envs" in sizes and config.num_envs * config.num_steps > sizes["num_envs"] * sizes["num_steps"]:
        num_envs = min(config.num_envs, sizes["num_envs"])
        if num_envs != config.num_envs:
            changes["num_envs"] = num_envs
        if num_envs * config.num_steps > sizes["num_envs"] * sizes["num_steps"]:
            changes["num_steps"] = sizes["num_steps"]
    if not changes:
        return config, []
    batch = changes.get("num_envs", config.num_envs) * changes.get("num_steps", config.num_steps)
    minibatches = config.num_minibatches
    while batch % minibatches:
        minibatches -= 1
    if minibatches != config.num_minibatches:
        changes["num_minibatches"] = minibatches
    lines = [f"{field}: {getattr(config, field)} -> {value} ({kind})" for field, value in changes.items()]
    return dataclasses.replace(config, **changes), lines
