"""Ray for labcore: join a cluster or start one on this machine, with a bounded start-up, every
server bound to 127.0.0.1 when labcore starts it, and Ray's logs kept out of notebooks.

    with ray_cluster.connect():                         # no cluster yet: a one-node Ray on loopback
        ...
    with ray_cluster.connect("auto"):                   # the cluster `ray start --head` runs on this machine
    with ray_cluster.connect("10.0.0.5:6379"):          # a cluster's head node, from any machine in it
    with ray_cluster.local_cluster(num_nodes=2) as address:   # two Ray nodes on loopback, each its own raylet
        with ray_cluster.connect(address):
            ray_cluster.wait_for_nodes(2)               # until the driver sees both alive
            ray_cluster.nodes()                         # one row per node: id, address, CPUs, alive

A Ray cluster runs whatever code its clients send it, so where labcore starts Ray it binds every
server (GCS, raylets, workers, object managers, the runtime-env agent) to 127.0.0.1: no other
machine can reach it. Ray itself advertises the machine's network address for a cluster started
with ``_node_ip_address="127.0.0.1"`` on Linux; labcore instead starts the nodes as Ray does for a
single machine without cluster support, whose servers listen on loopback only. A real cluster is
started with ``ray start`` on the machines' private network (docs/guide/distributed.md, "Actors on
other machines with Ray").

The dashboard is off where labcore starts Ray (it needs ``ray[default]``, and it is one more
server); actors' output goes to Ray's log files (``/tmp/ray/session_latest/logs``), not to the
notebook; an actor's exception still reaches the caller with its traceback.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

# Ray reads this when it is imported (on Linux it defaults to true): false makes a node advertise
# and bind 127.0.0.1 instead of the machine's address. Set in ``_loopback_only`` around starts.
_LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
START_TIMEOUT_S = 120.0
# Ray waits a fixed 30 s for a new node's raylet to register with the GCS, then raises an error
# that says so (ray._private.node). A loaded machine can be slower: labcore starts the node again,
# within the same time limit.
_RAYLET_LATE = "timed out during startup"
OBJECT_STORE_BYTES = 512 * 2**20  # enough for parameters and rollouts here; Ray's default takes 30% of RAM


def _quiet_environment() -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage-stats prompt or upload
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    # Ray's INFO lines (addresses, "started a local instance", token set-up) would fill a notebook.
    logging.getLogger("ray").setLevel(logging.WARNING)
    logging.getLogger("ray._private.authentication").setLevel(logging.ERROR)


@contextlib.contextmanager
def _loopback_only() -> Iterator[None]:
    """Nodes started inside this block listen on 127.0.0.1 only (their child processes inherit it)."""
    from ray._private import ray_constants

    before_env, before_flag = os.environ.get(_LOOPBACK_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[_LOOPBACK_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before_flag
        if before_env is None:
            os.environ.pop(_LOOPBACK_ENV, None)
        else:
            os.environ[_LOOPBACK_ENV] = before_env


def _bounded(what: str, timeout_s: float, start) -> Any:
    """Run ``start()`` and return its result, or raise TimeoutError after ``timeout_s`` seconds.

    Ray starts its nodes from the main thread only (it installs signal handlers), so the bound is
    a SIGALRM timer on the main thread; elsewhere (a thread, or an OS without SIGALRM) only Ray's
    own start-up timeouts apply.
    """
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return start()

    def expire(signum, frame):
        raise TimeoutError(f"{what} did not finish within {timeout_s:.0f} s (Ray's logs: /tmp/ray/session_latest/logs)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        return start()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (Linux's /proc; an empty set where there is none)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rpartition(")")[2].split()[1])  # after the command's name
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            children.setdefault(parent, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _kill(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _started(what: str, timeout_s: float, start, clean_up=lambda: None) -> Any:
    """``start()`` (which starts a Ray node) within ``timeout_s`` seconds, started again when Ray's
    own 30-s wait for the node's raylet runs out while time is left, with a line that says so.

    A start that fails leaves no process behind: ``clean_up()`` stops what Ray knows it started, and
    whatever process this one gained during the attempt (the half-started node's GCS, raylet and
    workers, which Ray has no handle on after its node failed to construct) is killed.
    """
    deadline = time.monotonic() + timeout_s
    attempt = 1
    while True:
        before = _descendants(os.getpid())
        try:
            return _bounded(what, max(deadline - time.monotonic(), 1.0), start)
        except BaseException as error:
            clean_up()
            _kill(_descendants(os.getpid()) - before)
            if _RAYLET_LATE not in str(error):
                raise
            if deadline - time.monotonic() < 1.0:
                raise TimeoutError(f"{what}: a Ray node's raylet did not register within {timeout_s:.0f} s (tries: "
                                   f"{attempt}; Ray's logs: /tmp/ray/session_latest/logs)") from error
            print(f"labcore: {what}: a raylet did not register within Ray's 30 s (try {attempt}; a loaded machine?): "
                  "starting it again", file=sys.stderr, flush=True)
            attempt += 1


def _check_reachable(address: str, timeout_s: float) -> None:
    """ConnectionError naming ``address`` when nothing listens there (Ray itself would retry for a minute)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address must be 'auto' or host:port, got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=min(timeout_s, 10.0)).close()
    except OSError as error:
        raise ConnectionError(f"no Ray head node answers at {address} ({error}); start one with `ray start --head`") from error


def init(address: str | None = None, *, num_cpus: int | None = None, object_store_bytes: int = OBJECT_STORE_BYTES,
         timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
    """Connect this process to Ray; returns ``{"address", "started", "nodes"}``.

    address None: join the Ray this process already runs, else start a new one-node Ray here on
    127.0.0.1 (``num_cpus`` logical CPUs, default this machine's), even where a cluster runs on this
    machine already (that one is "auto"). "auto": the cluster started on
    this machine with ``ray start``. "host:port": that head node (checked reachable first).
    Start-up longer than ``timeout_s`` raises TimeoutError.
    """
    import ray

    _quiet_environment()
    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        if address not in (None, "auto", current):
            raise ValueError(f"address: this process is connected to the Ray cluster at {current}; "
                             f"call ray.shutdown() before joining {address}")
        return {"address": current, "started": False, "nodes": len(ray.nodes())}
    options = dict(log_to_driver=False, logging_level="WARNING", configure_logging=True)
    try:
        started = _start_or_join(ray, address, num_cpus, object_store_bytes, timeout_s, options)
    except BaseException:
        if ray.is_initialized():  # a start-up cut short by its time limit: stop what it started
            ray.shutdown()
        raise
    return {"address": ray.get_runtime_context().gcs_address, "started": started, "nodes": len(ray.nodes())}


def _start_or_join(ray, address, num_cpus, object_store_bytes, timeout_s, options) -> bool:
    if address is None:
        with _loopback_only():
            _started("starting Ray", timeout_s, lambda: ray.init(
                address="local", num_cpus=num_cpus, object_store_memory=object_store_bytes, include_dashboard=False, **options),
                clean_up=ray.shutdown)
        started = True
    else:
        if address != "auto":
            _check_reachable(address, timeout_s)
        # A cluster on loopback (local_cluster) is joined as one of its own nodes would: on 127.0.0.1.
        on_loopback = address.rpartition(":")[0] in ("127.0.0.1", "localhost")
        with _loopback_only() if on_loopback else contextlib.nullcontext():
            _bounded(f"joining the Ray cluster at {address}", timeout_s, lambda: ray.init(address=address, **options))
        started = False
    return started


@contextlib.contextmanager
def connect(address: str | None = None, **kwargs) -> Iterator[dict[str, Any]]:
    """``init`` for a block: Ray is shut down on the way out only if this block connected it."""
    import ray

    connected_here = not ray.is_initialized()
    info = init(address, **kwargs)
    try:
        yield info
    finally:
        if connected_here:
            ray.shutdown()


@contextlib.contextmanager
def local_cluster(num_nodes: int = 2, *, cpus_per_node: int = 2, object_store_bytes: int = 128 * 2**20,
                  timeout_s: float = START_TIMEOUT_S) -> Iterator[str]:
    """A Ray cluster of ``num_nodes`` nodes on this machine, all on loopback; yields its address.

    Each node is a separate raylet with its own object store and worker processes, as on separate
    machines (Ray's ``cluster_utils``, which Ray's own multi-node tests use). Every process is
    stopped on the way out. A node whose raylet registers later than Ray's fixed 30 s (a loaded
    machine) is started again, with a line on stderr, while ``timeout_s`` lasts.
    """
    from ray.cluster_utils import Cluster

    if num_nodes < 1:
        raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
    _quiet_environment()
    node = dict(num_cpus=cpus_per_node, object_store_memory=object_store_bytes)
    cluster = None
    try:
        with _loopback_only():
            cluster = _started("starting a local Ray cluster", timeout_s, lambda: Cluster(
                initialize_head=True, head_node_args={**node, "include_dashboard": False}, shutdown_at_exit=True))
            for _ in range(num_nodes - 1):
                _started("adding a Ray node", timeout_s, lambda: cluster.add_node(**node))
        cluster.wait_for_nodes(timeout=timeout_s)
        yield cluster.address
    finally:
        if cluster is not None:
            import ray

            if ray.is_initialized() and ray.get_runtime_context().gcs_address == cluster.address:
                ray.shutdown()
            cluster.shutdown()


def nodes() -> list[dict[str, Any]]:
    """The connected cluster's nodes: ``{"node_id", "address", "cpus", "alive", "head"}`` each."""
    import ray

    rows = []
    for node in ray.nodes():
        rows.append({"node_id": node["NodeID"], "address": node["NodeManagerAddress"],
                     "cpus": node.get("Resources", {}).get("CPU", 0.0), "alive": bool(node["Alive"]),
                     "head": "node:__internal_head__" in node.get("Resources", {})})
    return rows


def wait_for_nodes(count: int, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """``nodes()`` once at least ``count`` are alive (a node that has just started may not be
    listed yet to a process that has just joined); TimeoutError naming the count seen otherwise."""

    deadline = time.monotonic() + timeout_s
    while True:
        rows = nodes()
        alive = sum(row["alive"] for row in rows)
        if alive >= count:
            return rows
        if time.monotonic() > deadline:
            raise TimeoutError(f"{alive} of {count} Ray nodes alive after {timeout_s:.0f} s")
        time.sleep(0.2)
