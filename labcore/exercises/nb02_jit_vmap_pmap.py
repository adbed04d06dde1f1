"""Notebook 02 (jit_vmap_pmap): per-example losses and gradients with vmap, a data-parallel step under pmap."""

from __future__ import annotations

import numpy as np

from labcore.exercises.checking import Exercise


PMEAN_AXIS = "devices"  # the axis name the pmean'd update exercise is run under


def _regression_batch_inputs(rng: np.random.Generator) -> tuple:
    features = int(rng.integers(2, 9))
    batch = int(rng.integers(3, 40))
    return (
        rng.normal(size=(features,)).astype(np.float32),
        np.float32(rng.normal()),
        rng.normal(size=(batch, features)).astype(np.float32),
        rng.normal(size=(batch,)).astype(np.float32),
    )


def _per_example_loss_reference(w, b, xs, ys):
    import jax

    def one(x, y):
        return 0.5 * (x @ w + b - y) ** 2

    return jax.vmap(one)(xs, ys)


def _per_example_grads_reference(w, b, xs, ys):
    import jax

    def one(w, x, y):
        return 0.5 * (x @ w + b - y) ** 2

    return jax.vmap(jax.grad(one), in_axes=(None, 0, 0))(w, xs, ys)


# Replicas the pmean'd step runs on. With one device a single replica's local gradient IS the whole
# batch's, so an answer without its pmean would pass; the checker then runs the replicas with
# jax.vmap under the same axis name instead (collectives mean the same there), 4 side by side.
REPLICAS_ON_ONE_DEVICE = 4


def _pmean_replicas() -> int:
    import jax

    return min(4, jax.device_count()) if jax.device_count() >= 2 else REPLICAS_ON_ONE_DEVICE


def _pmean_step_inputs(rng: np.random.Generator) -> tuple:
    features = int(rng.integers(2, 9))
    batch = _pmean_replicas() * int(rng.integers(2, 9))
    return (
        rng.normal(size=(features,)).astype(np.float32),
        rng.normal(size=(batch, features)).astype(np.float32),
        rng.normal(size=(batch,)).astype(np.float32),
        float(rng.uniform(0.01, 0.5)),
    )


def _mse_sgd_step(w, xs, ys, learning_rate):
    import jax
    import jax.numpy as jnp

    grad = jax.grad(lambda w: jnp.mean(0.5 * (xs @ w - ys) ** 2))(w)
    return w - learning_rate * grad


def _pmean_step_reference(w, xs, ys, learning_rate):
    """The single-device step on the whole batch, as every replica should return it: [n, D]."""
    import jax.numpy as jnp

    return jnp.broadcast_to(_mse_sgd_step(w, xs, ys, learning_rate), (_pmean_replicas(), *w.shape))


def _run_under_pmap(step):
    """Shard the batch over the replicas, run ``step`` with jax.pmap (jax.vmap on one device, see
    REPLICAS_ON_ONE_DEVICE), return every replica's weights."""
    import jax

    def run(w, xs, ys, learning_rate):
        n = _pmean_replicas()
        shard = lambda a: a.reshape(n, a.shape[0] // n, *a.shape[1:])  # noqa: E731
        one_replica = lambda w, x, y: step(w, x, y, learning_rate)  # noqa: E731
        if jax.device_count() >= 2:
            replicas = jax.pmap(one_replica, axis_name=PMEAN_AXIS, in_axes=(None, 0, 0), devices=jax.devices()[:n])
        else:
            replicas = jax.vmap(one_replica, axis_name=PMEAN_AXIS, in_axes=(None, 0, 0))
        return replicas(w, shard(xs), shard(ys))

    return run


def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""
    return [
        Exercise(
            name="vmap_loss",
            description="Per-example squared error 0.5 * (x @ w + b - y)**2 for a batch xs [B, D], ys [B] -> [B].\n"
            "Write the loss for ONE example (x: [D], y: []) and batch it with jax.vmap(one, in_axes=(0, 0)) "
            "(w and b are shared: close over them, or give them in_axes=None).",
            reference=_per_example_loss_reference,
            make_inputs=_regression_batch_inputs,
            jit=True,
        ),
        Exercise(
            name="per_example_grads",
            description="Gradient of each example's loss 0.5 * (x @ w + b - y)**2 with respect to w: xs [B, D] -> [B, D].\n"
            "jax.grad of the one-example loss gives [D]; jax.vmap(jax.grad(one), in_axes=(None, 0, 0))(w, xs, ys) "
            "maps it over the batch while sharing w (in PyTorch this needs functorch/torch.func).",
            reference=_per_example_grads_reference,
            make_inputs=_regression_batch_inputs,
            jit=True,
        ),
        Exercise(
            name="pmean_update",
            description=f"One data-parallel SGD step step(w, xs, ys, lr) on this device's shard, run under jax.pmap "
            f"with axis_name='{PMEAN_AXIS}'.\n"
            "grad = jax.grad(lambda w: jnp.mean(0.5 * (xs @ w - ys) ** 2))(w) is this shard's gradient; average it "
            f"over devices with jax.lax.pmean(grad, '{PMEAN_AXIS}') before returning w - lr * grad, so every replica "
            "takes the step a single device would take on the whole batch.",
            reference=_pmean_step_reference,
            make_inputs=_pmean_step_inputs,
            run_with=_run_under_pmap,
        ),
    ]
