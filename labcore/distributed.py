"""Multi-process JAX: joining a cluster, a global device mesh, global arrays, and a local launcher.

A JAX program runs as one process per host (or, here, several processes on one machine, each
with its own CPU devices). ``jax.distributed.initialize`` joins them into one cluster, after
which ``jax.devices()`` lists every process's devices and a jitted function over a global mesh
runs on all of them, its collectives (``psum``, ``pmean``) crossing processes (on the CPU through
gloo, over loopback here; NCCL / ICI on GPU / TPU clusters).

    # in each worker, before any other JAX call
    distributed.initialize()                 # from the launcher's environment, or auto-detected
    mesh = distributed.global_mesh()         # 1-D mesh over every device of every process

    # from a shell or a notebook cell: 2 processes x 2 CPU devices on 127.0.0.1
    python -m labcore launch --num-processes 2 --devices-per-process 2 -- train dqn-data-parallel --env CartPole-v1

The launcher streams each worker's output with a ``[rank N]`` prefix, and if a worker dies, or
the cluster does not form within ``join_timeout_s``, or the run exceeds ``timeout_s``, it stops
every worker (their whole process groups) and returns a non-zero status with the reason: no
hang, no orphans.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import numpy as np

AXIS = "devices"
ENV_COORDINATOR = "LABCORE_COORDINATOR"
ENV_NUM_PROCESSES = "LABCORE_NUM_PROCESSES"
ENV_PROCESS_ID = "LABCORE_PROCESS_ID"
JOINED_MARK = "labcore-distributed: joined"  # a worker prints this once the cluster has formed


# ----------------------------------------------------------------------------------------------
# Inside a worker.


def launched() -> bool:
    """True in a process started by ``launch`` (its environment names the cluster)."""
    return ENV_PROCESS_ID in os.environ


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    timeout_s: int = 60,
) -> tuple[int, int]:
    """Join the cluster; returns (process_index, process_count). Call before any other JAX use.

    Arguments given here win; then the launcher's environment (LABCORE_COORDINATOR,
    LABCORE_NUM_PROCESSES, LABCORE_PROCESS_ID); with none of them, JAX detects the cluster itself
    (SLURM, TPU pods, ...). A single process with nothing to join returns (0, 1) untouched.
    """
    import jax

    coordinator_address = coordinator_address or os.environ.get(ENV_COORDINATOR)
    if num_processes is None and ENV_NUM_PROCESSES in os.environ:
        num_processes = int(os.environ[ENV_NUM_PROCESSES])
    if process_id is None and ENV_PROCESS_ID in os.environ:
        process_id = int(os.environ[ENV_PROCESS_ID])
    explicit = (coordinator_address, num_processes, process_id)
    if any(value is not None for value in explicit):
        if any(value is None for value in explicit):
            raise ValueError(
                "distributed.initialize needs coordinator_address, num_processes and process_id together, got "
                f"coordinator_address={coordinator_address!r}, num_processes={num_processes!r}, process_id={process_id!r}"
            )
        if not 0 <= process_id < num_processes:
            raise ValueError(f"process_id must be in [0, {num_processes}), got {process_id}")
        jax.distributed.initialize(coordinator_address, num_processes, process_id, initialization_timeout=timeout_s)
    elif _cluster_detectable():
        jax.distributed.initialize(initialization_timeout=timeout_s)
    print(f"{JOINED_MARK} process {jax.process_index()} of {jax.process_count()}, "
          f"{jax.local_device_count()} local / {jax.device_count()} global devices", flush=True)
    return jax.process_index(), jax.process_count()


def _cluster_detectable() -> bool:
    # The environments jax.distributed can read its arguments from.
    return any(name in os.environ for name in ("SLURM_JOB_ID", "TPU_WORKER_HOSTNAMES", "OMPI_COMM_WORLD_SIZE"))


def global_mesh(axis: str = AXIS) -> Any:
    """A 1-D mesh over every device of every process, ordered by process then local device."""
    import jax
    from jax.sharding import AxisType

    return jax.make_mesh((jax.device_count(),), (axis,), axis_types=(AxisType.Explicit,))


def global_array(host_value: np.ndarray, mesh: Any, spec: Any) -> Any:
    """A global jax.Array from a value every process knows in full (e.g. derived from a seed).

    Each process hands over only the slices its own devices hold; nothing crosses the network.
    """
    import jax
    from jax.sharding import NamedSharding

    host_value = np.asarray(host_value)
    return jax.make_array_from_callback(host_value.shape, NamedSharding(mesh, spec), lambda index: host_value[index])


def fingerprint(tree: Any) -> str:
    """A short hash of a pytree's bytes (of this process's first shard of each leaf): equal
    fingerprints mean bit-for-bit equal values."""
    digest = hashlib.sha256()
    import jax

    for leaf in jax.tree_util.tree_leaves(tree):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            leaf = leaf.addressable_shards[0].data
        digest.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return digest.hexdigest()[:16]


def assert_same_on_every_process(tree: Any, what: str = "parameters") -> str:
    """Raise unless ``tree`` is bit-for-bit the same in every process; returns its fingerprint."""
    import jax
    from jax.experimental import multihost_utils

    mine = fingerprint(tree)
    codes = np.frombuffer(bytes.fromhex(mine), np.uint8)
    every = np.asarray(multihost_utils.process_allgather(codes))  # [process_count, 8]
    if not (every == every[0]).all():
        raise AssertionError(
            f"{what} differ between processes: " + ", ".join(row.tobytes().hex() for row in every.reshape(jax.process_count(), -1))
        )
    return mine


def cluster_check() -> dict[str, Any]:
    """A worker's smoke test: join, build the global mesh, run a cross-process psum and a
    data-parallel mean, and check a replicated value is identical everywhere. Prints and returns
    what it saw."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    rank, count = initialize()
    mesh = global_mesh()
    n = jax.device_count()
    # device d holds the number d + 1; the psum over all devices of all processes is n (n + 1) / 2
    values = global_array(np.arange(1, n + 1, dtype=np.float32), mesh, P(AXIS))
    total = jax.jit(lambda v: jax.shard_map(lambda x: jax.lax.psum(x, AXIS), mesh=mesh, in_specs=P(AXIS), out_specs=P())(v))(values)
    total = float(np.asarray(total)[0])
    replicated = jax.jit(lambda v: jnp.mean(v), out_shardings=jax.sharding.NamedSharding(mesh, P()))(values)
    fp = assert_same_on_every_process(np.asarray(replicated), "the global mean")
    report = {"process": rank, "processes": count, "devices": n, "local_devices": jax.local_device_count(),
              "psum": total, "expected_psum": n * (n + 1) / 2, "mean_fingerprint": fp}
    print(f"cluster-check {report}", flush=True)
    if total != n * (n + 1) / 2:
        raise AssertionError(f"psum over {n} devices gave {total}, expected {n * (n + 1) / 2}")
    return report


# ----------------------------------------------------------------------------------------------
# The launcher.


@dataclasses.dataclass
class LaunchResult:
    returncode: int  # 0 when every worker exited 0
    message: str  # what happened, one line
    returncodes: list[int | None]  # each worker's exit status (None: it had to be stopped)
    output: list[list[str]]  # each worker's lines


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_only_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``base`` (default: this process's environment) in which JAX uses the CPU platform only.

    The launcher's workers run with it (the actor-learner's Ray actors get the same setting through
    their runtime environment).
    One accelerator chip is held by one process: a second process asking for a TPU that a notebook
    kernel already holds fails ("TPU in use"), and a second GPU process preallocates most of the
    GPU's memory again. The simulated hosts and the actors are CPU programs anyway.
    """
    env = dict(os.environ if base is None else base)
    env["JAX_PLATFORMS"] = "cpu"
    return env


def _worker_env(rank: int, num_processes: int, devices_per_process: int, port: int) -> dict[str, str]:
    env = cpu_only_env()  # a local cluster simulates hosts with CPU devices
    flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", env.get("XLA_FLAGS", ""))
    env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices_per_process}".strip()
    env[ENV_COORDINATOR] = f"127.0.0.1:{port}"
    env[ENV_NUM_PROCESSES] = str(num_processes)
    env[ENV_PROCESS_ID] = str(rank)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def launch(
    command: Sequence[str],
    num_processes: int = 2,
    devices_per_process: int = 2,
    timeout_s: float | None = None,
    join_timeout_s: float = 60.0,
    stream: TextIO | None = sys.stdout,
) -> LaunchResult:
    """Run ``command`` (an argv list) as ``num_processes`` workers on 127.0.0.1.

    A command starting with "-" or a labcore subcommand (e.g. ["train", "dqn-data-parallel", ...]) runs as
    ``python -m labcore ...``; otherwise it is run as given (e.g. [sys.executable, "script.py"]).
    Workers are expected to call ``initialize()``, which prints JOINED_MARK once the cluster
    formed. Returns when every worker has exited, or after stopping all of them when one fails,
    when they have not all joined within join_timeout_s, or at timeout_s (None: no limit, as a
    training run needs; a worker that fails still stops them all).
    """
    if num_processes < 1 or devices_per_process < 1:
        raise ValueError(f"need num_processes >= 1 and devices_per_process >= 1, got {num_processes}, {devices_per_process}")
    command = list(command)
    if not command:
        raise ValueError("launch needs a command")
    if not (command[0].endswith("python") or "/" in command[0] or command[0].endswith(".py")):
        command = [sys.executable, "-m", "labcore", *command]
    port = free_port()
    output: list[list[str]] = [[] for _ in range(num_processes)]
    joined = [False] * num_processes
    lock = threading.Lock()
    workers = [
        subprocess.Popen(
            command,
            env=_worker_env(rank, num_processes, devices_per_process, port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,  # its own process group, so stopping it stops its children too
        )
        for rank in range(num_processes)
    ]

    def pump(rank: int) -> None:
        for line in workers[rank].stdout:
            line = line.rstrip("\n")
            with lock:
                output[rank].append(line)
                if JOINED_MARK in line:
                    joined[rank] = True
                if stream is not None:
                    print(f"[rank {rank}] {line}", file=stream, flush=True)

    readers = [threading.Thread(target=pump, args=(rank,), daemon=True) for rank in range(num_processes)]
    for reader in readers:
        reader.start()

    started = time.monotonic()
    message = ""
    try:
        while True:
            codes = [worker.poll() for worker in workers]
            failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
            elapsed = time.monotonic() - started
            if failed:
                rank = failed[0]
                message = f"worker {rank} died with exit status {codes[rank]}; stopped the others"
                break
            if all(code == 0 for code in codes):
                message = f"all {num_processes} workers finished"
                break
            if not all(joined) and elapsed > join_timeout_s:
                missing = [rank for rank, ok in enumerate(joined) if not ok]
                message = f"workers {missing} did not join the cluster within {join_timeout_s:.0f} s; stopped all"
                break
            if timeout_s is not None and elapsed > timeout_s:
                message = f"the run exceeded its {timeout_s:.0f} s timeout; stopped all workers"
                break
            time.sleep(0.05)
    finally:
        final = _stop_all(workers)
        for reader in readers:
            reader.join(timeout=5)
    ok = message.startswith("all ")
    if stream is not None:
        print(f"[launch] {message}", file=stream, flush=True)
    return LaunchResult(0 if ok else 1, message, final, output)


def _stop_all(workers: list[subprocess.Popen], grace_s: float = 5.0) -> list[int | None]:
    """Terminate every still-running worker's process group, then kill what is left."""
    codes = [worker.poll() for worker in workers]
    for worker, code in zip(workers, codes):
        if code is None:
            _signal_group(worker, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for worker in workers:
        try:
            worker.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(worker, signal.SIGKILL)
            worker.wait()
        _signal_group(worker, signal.SIGKILL)  # anything a worker left behind in its group
    return codes


def _signal_group(worker: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(worker.pid, sig)
    except ProcessLookupError:
        pass
