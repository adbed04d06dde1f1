"""Notebook 02 (jit_scan_vmap): per-example losses and gradients with vmap."""

from __future__ import annotations

import numpy as np

from labcore.exercises.checking import Exercise


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
    ]
