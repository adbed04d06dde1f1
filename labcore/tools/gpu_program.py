"""The program XLA compiles for a GPU, on a machine without one, and the kernels it launches per loop step.

On a GPU every kernel launch has a cost of its own, so a small jitted step may cost its launches
more than its arithmetic, and a rollout that runs one step after another pays them at every step.
How many there are can be read from the program XLA compiles for the GPU (its optimised HLO),
and XLA compiles for a GPU it is told about without one being present:

    text = compile_for_gpu(train, jax.random.key(0))      # JAX's CUDA plugin needed, not a GPU
    for loop in kernel_loops(text):                       # every loop, outer first
        print(loop.depth, loop.trips, loop.kernels)       # e.g. 1, 128, 23: a rollout step's kernels
    kernels_per_call(text)                                # kernels of one call, loops unrolled

``compile_for_gpu`` needs JAX's CUDA plugin of the installed jaxlib's version on ``sys.path`` before
JAX starts, with ``JAX_PLATFORMS=cpu`` (so that JAX does not look for a GPU to run on):

    pip install --no-deps --target gpu-compiler jax-cuda12-plugin==X jax-cuda12-pjrt==X   # X: jaxlib's version
    JAX_PLATFORMS=cpu PYTHONPATH=gpu-compiler python benchmarks/gpu_kernels.py

(``make gpu-compiler`` does the first line). The target is NVIDIA's H200, as XLA's own device
description gives it (``xla/backends/gpu/target_config/specs/h200.txtpb``, the fields the
installed XLA reads). What is counted is what XLA launches, not what it costs: a fused matrix
product and a one-element add count one each, and a loop of known length launches its body that
many times without waiting for the device (a loop of unknown length reads its test back to the
host at every turn, counted as one kernel more per turn). The count is exact for the compiled
program; the time it costs is the device's, measured by ``benchmarks/ppo_speed.py`` on one.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax

from labcore import devices

# XLA's description of an NVIDIA H200 141GB HBM3e (its specs folder), the fields every XLA since JAX 0.7 reads.
H200 = """
gpu_device_info {
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: 4800000000000
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: 151397597184
  shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 }
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
dnn_version_info { major: 9 minor: 10 }
device_description_str: "NVIDIA H200 141GB HBM3e"
"""

TARGETS = {"h200": H200}

# Instructions that launch nothing: they name, pack or unpack buffers.
_NO_KERNEL = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast", "after-all", "opt-barrier",
              "partition-id", "replica-id", "add-dependency"}


class Loop(NamedTuple):
    """One while loop of a compiled program."""

    body: str  # the body computation's name in the HLO text
    where: str  # the call that made it: "scan_packed (labcore/packing.py:76)" ("" if the HLO does not say)
    depth: int  # 0: at the top of the program; 1: inside one loop; ...
    trips: int | None  # XLA's known trip count (None: decided at run time)
    kernels: int  # launched by one turn of the body, its inner loops unrolled


def gpu_device(target: str = "h200") -> Any:
    """A compile-only JAX device for ``target`` (a key of TARGETS); needs JAX's CUDA plugin, not a GPU."""
    from jax.experimental import topologies

    if target not in TARGETS:
        raise ValueError(f"target: one of {sorted(TARGETS)}, got {target!r}")
    try:
        topology = topologies.get_topology_desc("labcore", "cuda", target_config=TARGETS[target], topology="1x1x1")
    except (NotImplementedError, RuntimeError) as err:
        raise RuntimeError(
            f"compiling for a GPU without one needs JAX's CUDA plugin of jaxlib's version on sys.path before JAX "
            f"starts (make gpu-compiler, then PYTHONPATH=.venv/gpu-compiler JAX_PLATFORMS=cpu): {err}") from None
    return topology.devices[0]


@contextlib.contextmanager
def _callbacks_compile_only() -> Iterator[None]:
    """Let a program with host callbacks (``jax.debug.callback``) compile for a device that cannot run.

    Lowering a callback asks for the running backend (only a TPU's lowering uses it) and compiling
    hands the Python callables to the client, which a compile-only client refuses; here the CPU
    backend answers the first and the callables are left out of the second. The compiled program
    is the same: a callback is a custom call that names its callable by index.
    """
    from jax._src import compiler
    from jax._src.interpreters import mlir

    get_backend, compile_and_load = mlir.ModuleContext.get_backend, compiler.backend_compile_and_load

    def backend(self: Any) -> Any:
        try:
            return get_backend(self)
        except RuntimeError:
            return jax.devices("cpu")[0].client

    def compile_without_callables(backend: Any, module: Any, executable_devices: Any, options: Any,
                                  host_callbacks: Any) -> Any:
        return compile_and_load(backend, module, executable_devices, options, [])

    mlir.ModuleContext.get_backend, compiler.backend_compile_and_load = backend, compile_without_callables
    try:
        yield
    finally:
        mlir.ModuleContext.get_backend, compiler.backend_compile_and_load = get_backend, compile_and_load


def compile_for_gpu(fn: Callable[..., Any], *args: Any, target: str = "h200") -> str:
    """The optimised HLO text of ``jax.jit(fn)(*args)`` as XLA compiles it for ``target``.

    args: arrays or ``jax.ShapeDtypeStruct``s (only their shapes and dtypes are used). ``fn`` is
    traced in the form it takes on a GPU (``labcore.devices.compiling_for``), as it would be there.
    """
    sharding = jax.sharding.SingleDeviceSharding(gpu_device(target))
    shapes = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), args)
    with _callbacks_compile_only(), devices.compiling_for("gpu"):
        return jax.jit(fn, in_shardings=sharding).lower(*shapes).compile().as_text()


def _computations(text: str) -> dict[str, list[str]]:
    """HLO text -> {computation name: its instruction lines}; the entry computation also under "ENTRY"."""
    computations: dict[str, list[str]] = {}
    lines: list[str] | None = None
    for line in text.splitlines():
        header = re.match(r"(ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
        if header and not line.startswith(" "):
            lines = computations.setdefault(header.group(2), [])
            if header.group(1):
                computations["ENTRY"] = lines
        elif line.startswith("}"):
            lines = None
        elif lines is not None and line.strip():
            lines.append(line.strip())
    if "ENTRY" not in computations:
        raise ValueError("not the text of an HLO module: no ENTRY computation")
    return computations


def _opcode(instruction: str) -> str:
    """'%x = f32[4]{0} add(%a, %b), ...' -> 'add' (the shape may be a tuple holding spaces)."""
    shape_and_rest = instruction.split(" = ", 1)[1]
    depth = 0
    for at, char in enumerate(shape_and_rest):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == " " and depth == 0:
            return shape_and_rest[at + 1:].split("(", 1)[0]
    raise ValueError(f"no opcode in {instruction!r}")


def _called(instruction: str, attribute: str) -> list[str]:
    """The computations ``attribute`` names in an instruction (``body=%b``, ``branch_computations={%x, %y}``)."""
    found = re.search(rf"{attribute}=(\{{[^}}]*\}}|%?[\w.\-]+)", instruction)
    return [] if not found else [name.strip().lstrip("%") for name in found.group(1).strip("{}").split(",")]


def _call_sites(text: str) -> dict[str, str]:
    """The HLO text's stack frame ids -> "function (file:line)" of the frame's own line."""
    tables: dict[str, dict[str, str]] = {}
    table = None
    for line in text.splitlines():
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            table = tables.setdefault(line, {})
        elif table is not None and (entry := re.match(r"(\d+) (.*)$", line)):
            table[entry.group(1)] = entry.group(2)
        elif not line.strip() or not line[0].isdigit():
            table = None
    names = {key: value.strip('"') for key, value in tables.get("FileNames", {}).items()}
    functions = {key: value.strip('"').split("<locals>.")[-1] for key, value in tables.get("FunctionNames", {}).items()}
    sites = {}
    for frame, value in tables.get("StackFrames", {}).items():
        location = tables.get("FileLocations", {}).get(re.search(r"file_location_id=(\d+)", value).group(1), "")
        fields = dict(re.findall(r"(\w+)=(\d+)", location))
        if fields:
            path = re.sub(r".*/(site-packages|dist-packages)/", "", names.get(fields["file_name_id"], "?"))
            path = re.sub(r".*/(labcore/)", r"\1", path)
            sites[frame] = f"{functions.get(fields['function_name_id'], '?')} ({path}:{fields['line']})"
    return sites


def _kernels(computations: dict[str, list[str]], name: str, depth: int, loops: list[Loop],
             sites: dict[str, str] | None = None) -> int:
    sites = sites or {}
    total = 0
    for instruction in computations[name]:
        opcode = _opcode(instruction)
        if opcode in _NO_KERNEL:
            continue
        if opcode == "while":
            (body,), (condition,) = _called(instruction, "body"), _called(instruction, "condition")
            known = re.search(r'"known_trip_count":\{"n":"(\d+)"', instruction)
            per_turn = _kernels(computations, body, depth + 1, loops, sites)
            if known:
                trips = int(known.group(1))
            else:  # the test runs on the device and its answer is read back: one more kernel a turn
                trips, per_turn = None, per_turn + _kernels(computations, condition, depth + 1, []) + 1
            frame = re.search(r"stack_frame_id=(\d+)", instruction)
            loops.append(Loop(body, sites.get(frame.group(1), "") if frame else "", depth, trips, per_turn))
            total += (trips if trips is not None else 1) * per_turn
        elif opcode == "conditional":  # the predicate is read back, then the branch taken runs
            branches = _called(instruction, "branch_computations") or (
                _called(instruction, "true_computation") + _called(instruction, "false_computation"))
            total += 1 + max(_kernels(computations, branch, depth + 1, loops, sites) for branch in branches)
        elif opcode == "call" and not any("command_buffer" in callee for callee in _called(instruction, "to_apply")):
            total += sum(_kernels(computations, callee, depth, loops, sites) for callee in _called(instruction, "to_apply"))
        else:  # a fusion, a library call, a copy, a command buffer (one graph launch), ...
            total += 1
    return total


def kernel_loops(text: str) -> list[Loop]:
    """Every while loop of an optimised HLO module (``compile_for_gpu``), outer first, in program order."""
    computations, loops = _computations(text), []
    _kernels(computations, _entry_name(computations), 0, loops, _call_sites(text))
    return sorted(loops, key=lambda loop: loop.depth)


def kernels_per_call(text: str) -> int:
    """Kernels one call of the program launches, every loop of known length unrolled (an unknown one counted once)."""
    computations = _computations(text)
    return _kernels(computations, _entry_name(computations), 0, [])


class Op(NamedTuple):
    """One instruction of a compiled program, as a profiler's trace names it (``fusion.12``, ``copy.3``)."""

    opcode: str  # "fusion", "dot", "copy", "while", "custom-call", ...
    where: str  # the call that made it, as ``Loop.where`` ("" when XLA made it: a loop's copies, its test)


def ops(text: str) -> dict[str, Op]:
    """Every instruction of an optimised HLO module (any backend's), by name: its opcode and where it was written."""
    sites, found = _call_sites(text), {}
    for lines in _computations(text).values():
        for instruction in lines:
            name = instruction.removeprefix("ROOT ").split(" = ", 1)[0].lstrip("%")
            frame = re.search(r"stack_frame_id=(\d+)", instruction)
            found[name] = Op(_opcode(instruction), sites.get(frame.group(1), "") if frame else "")
    return found


def _entry_name(computations: dict[str, list[str]]) -> str:
    return next(name for name, lines in computations.items() if lines is computations["ENTRY"] and name != "ENTRY")
