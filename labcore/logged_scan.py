"""A program's updates in one ``lax.scan``, its metrics rows sent to the host while it runs: ``scan_updates``.

    state, metrics = scan_updates(update, state, n, updates_done=..., callback=print, log_every=10,
                                  rows_per_burst=burst_rows(steps_per_update, 10))

Every jitted training program's ``run(state, n)`` is this scan (``labcore.loop`` drives them). The
logged rows reach the host in bursts, each host call carrying as many rows as cover at most
``METRICS_BURST_STEPS`` env steps, because each host call is a transfer and a Python call from
inside the compiled program. On a GPU the scan takes a form without a branch per update
(``labcore.devices.launch_bound``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from labcore import devices

# Logged metrics reach the host in bursts: each host call carries as many logged rows as cover at
# most this many env steps (at least one row, so an update longer than this is one call per row).
METRICS_BURST_STEPS = 65_536

Metrics = dict[str, jax.Array]


def burst_rows(steps_per_update: int, log_every: int) -> int:
    """Logged rows per host call: as many as fit in ``METRICS_BURST_STEPS`` env steps, at least one."""
    return max(1, METRICS_BURST_STEPS // (steps_per_update * log_every))


def scan_updates(
    update: Callable[[Any], tuple[Any, Metrics]],
    state: Any,
    num_updates: int,
    *,
    updates_done: Callable[[Any], jax.Array],
    callback: Callable[[dict[str, np.ndarray]], None] | None = None,
    log_every: int = 1,
    rows_per_burst: int = 1,
    branch_free: bool | None = None,
) -> tuple[Any, Metrics]:
    """``num_updates`` (static) applications of ``update(state) -> (state, metrics)`` in one
    ``lax.scan``; returns the final state and the metrics with leaves [num_updates].

    callback: called on the host with the metrics of every update after which ``updates_done`` is
    a multiple of ``log_every`` (numpy arrays, plus "update"; under ``jax.vmap``, once per seed),
    in order, while the compiled program runs. A metric is a scalar or a vector (e.g. one value
    per world), which reaches the callback as a 1-d array. The logged rows wait on the device and
    travel to the host ``rows_per_burst`` at a time (the rest at the end): each host callback is a
    transfer and a Python call from inside the compiled program, so fewer, larger bursts cost less.
    The callback changes no number: the state and metrics are those of the scan without it.

    branch_free (None: on a GPU, ``devices.launch_bound``): instead of a ``lax.cond`` after every
    update (a GPU copies its predicate to the host and waits), scans of ``rows_per_burst *
    log_every`` updates, each followed by one host call with all its metrics (the host keeps the
    logged rows), and a shorter scan for the rest: the same calls, ``update`` compiled twice if a rest.
    """
    if log_every < 1:
        raise ValueError(f"log_every must be >= 1, got {log_every}")
    step = lambda carry, _: update(carry)  # noqa: E731
    if callback is None:
        return jax.lax.scan(step, state, None, length=num_updates)
    if devices.launch_bound() if branch_free is None else branch_free:
        return _scan_updates_branch_free(update, state, num_updates, updates_done, callback, log_every,
                                         rows_per_burst * log_every)
    names = dict(jax.eval_shape(update, state)[1])
    names["update"] = jax.ShapeDtypeStruct((), jnp.int32)
    ints = [name for name in names if jnp.issubdtype(names[name].dtype, jnp.integer)]  # counts, kept exact
    floats = [name for name in names if name not in ints]
    # a row is each kind's metrics flattened side by side: a metric's columns, its start and end
    columns = {name: int(np.prod(names[name].shape)) for name in names}
    spans = {name: (start := sum(columns[other] for other in group[:group.index(name)]), start + columns[name])
             for group in (floats, ints) for name in group}

    def flat(logged: Metrics, group: list[str], dtype) -> jax.Array:
        return jnp.concatenate([jnp.ravel(jnp.asarray(logged[name], dtype)) for name in group]) if group else jnp.zeros(0, dtype)

    def send(burst: tuple[jax.Array, jax.Array, jax.Array]) -> None:
        def on_host(float_rows, int_rows, count) -> None:
            float_rows, int_rows = np.asarray(float_rows), np.asarray(int_rows)
            for row in range(int(count)):
                values = {name: (float_rows if name in floats else int_rows)[row, slice(*spans[name])] for name in names}
                callback({name: values[name].reshape(names[name].shape) for name in names})

        jax.debug.callback(on_host, *burst)

    def update_and_log(carry, _):
        state, (float_rows, int_rows, count) = carry
        state, metrics = update(state)
        done = jnp.asarray(updates_done(state), jnp.int32)
        logged = {**metrics, "update": done}
        # written at row `count` every update; kept (count + 1) only when this update is logged
        float_rows = float_rows.at[count].set(flat(logged, floats, jnp.float32))
        int_rows = int_rows.at[count].set(flat(logged, ints, jnp.int32))
        count = count + (done % log_every == 0)
        full = count == rows_per_burst
        jax.lax.cond(full, send, lambda burst: None, (float_rows, int_rows, count))
        return (state, (float_rows, int_rows, jnp.where(full, 0, count))), metrics

    empty = (
        jnp.zeros((rows_per_burst, sum(columns[name] for name in floats)), jnp.float32),
        jnp.zeros((rows_per_burst, sum(columns[name] for name in ints)), jnp.int32),
        jnp.int32(0),
    )
    (state, burst), metrics = jax.lax.scan(update_and_log, (state, empty), None, length=num_updates)
    jax.lax.cond(burst[2] > 0, send, lambda burst: None, burst)  # the rows logged since the last burst
    return state, metrics


def _scan_updates_branch_free(update, state, num_updates, updates_done, callback, log_every, per_call):
    """``scan_updates`` with a host call after every ``per_call`` updates and none in between."""
    ints = {name for name, leaf in jax.eval_shape(update, state)[1].items() if jnp.issubdtype(leaf.dtype, jnp.integer)}

    def counted(state, _):
        state, metrics = update(state)
        return state, (metrics, jnp.asarray(updates_done(state), jnp.int32))

    def send(metrics: Metrics, done: jax.Array) -> None:
        def on_host(metrics, done) -> None:
            done = np.asarray(done)
            for row in np.flatnonzero(done % log_every == 0):
                callback({**{name: np.asarray(value[row], np.int32 if name in ints else np.float32)
                             for name, value in metrics.items()}, "update": np.asarray(done[row])})

        jax.debug.callback(on_host, metrics, done)

    def burst(state, _):
        state, (metrics, done) = jax.lax.scan(counted, state, None, length=per_call)
        send(metrics, done)
        return state, metrics

    bursts, rest = divmod(num_updates, per_call := min(per_call, num_updates))
    state, metrics = jax.lax.scan(burst, state, None, length=bursts)  # leaves [bursts, per_call, ...]
    metrics = jax.tree_util.tree_map(lambda leaf: leaf.reshape(bursts * per_call, *leaf.shape[2:]), metrics)
    if rest:
        state, (tail, done) = jax.lax.scan(counted, state, None, length=rest)
        send(tail, done)
        metrics = jax.tree_util.tree_map(lambda head, end: jnp.concatenate([head, end]), metrics, tail)
    return state, metrics
