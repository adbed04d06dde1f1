"""A 2-D convolution whose gradient XLA's CPU backend runs as fast inside a loop as outside one.

XLA's CPU compiler hands a convolution to Eigen's fast multi-threaded kernel only when its dimension
numbers are canonical (NHWC input, HWIO kernel, NHWC output); its pass that rewrites the others into
that form (``ConvCanonicalization``, xla/service/cpu/conv_canonicalization.h: "all top-level
convolutions") visits the program's top level only. The convolutions that ``jax.grad`` derives from
a forward one are not canonical (the weight gradient contracts over the batch), so inside a
``lax.scan`` (an epoch of minibatch steps) they fall back to a plain loop nest: PQN's 64 minibatch
steps of an Atari update took 130 s that way against 8.1 s with this module's convolution
(``benchmarks/atari.py speed``, a 2-core Intel Xeon, jax 0.10.2, 2026-11-29; docs/results/atari.md).
tests/test_q_networks.py holds the loop's program to canonical convolutions.

``conv2d`` computes the same forward convolution and defines its gradient with the transposes
written out, so that every convolution XLA sees is canonical wherever it sits. On a CPU it gives
the same gradients, bit for bit, as JAX's own at the top level (XLA's pass rewrites them the same
way); on other platforms (cuDNN) it is ``lax.conv_general_dilated`` itself.
"""

from __future__ import annotations

from functools import partial

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from labcore import devices

CANONICAL = ("NHWC", "HWIO", "NHWC")


def conv2d(x: jax.Array, w: jax.Array, stride: int) -> jax.Array:
    """VALID convolution: x [B, H, W, C], w [kh, kw, C, O] -> [B, (H - kh) // stride + 1, ..., O]."""
    if devices.target_platform() == "cpu":
        return _canonical_conv(x, w, stride)
    return lax.conv_general_dilated(x, w, (stride, stride), "VALID", dimension_numbers=CANONICAL)


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def _canonical_conv(x: jax.Array, w: jax.Array, stride: int) -> jax.Array:
    return lax.conv_general_dilated(x, w, (stride, stride), "VALID", dimension_numbers=CANONICAL)


def _forward(x, w, stride):
    return _canonical_conv(x, w, stride), (x, w)


def _backward(stride, saved, grad_out):
    """grad_out [B, Ho, Wo, O] -> (dx [B, H, W, C], dw [kh, kw, C, O]), each one canonical convolution."""
    x, w = saved
    kh, kw = w.shape[:2]
    (height, width), (out_h, out_w) = x.shape[1:3], grad_out.shape[1:3]
    # rows and columns past the last window the forward pass read get no gradient
    spare_h, spare_w = height - ((out_h - 1) * stride + kh), width - ((out_w - 1) * stride + kw)
    # dx: the output gradient spread out by the stride, correlated with the kernel turned 180 degrees
    flipped = jnp.transpose(w[::-1, ::-1], (0, 1, 3, 2))  # [kh, kw, O, C]
    dx = lax.conv_general_dilated(grad_out, flipped, (1, 1), ((kh - 1, kh - 1 + spare_h), (kw - 1, kw - 1 + spare_w)),
                                  lhs_dilation=(stride, stride), dimension_numbers=CANONICAL)
    # dw: channels as the batch, the batch as the features, the output gradient as a dilated kernel
    dw = lax.conv_general_dilated(jnp.transpose(x, (3, 1, 2, 0)), jnp.transpose(grad_out, (1, 2, 0, 3)), (1, 1), "VALID",
                                  rhs_dilation=(stride, stride), dimension_numbers=CANONICAL)  # [C, kh + spare, kw + spare, O]
    return dx, jnp.transpose(dw[:, :kh, :kw, :], (1, 2, 0, 3))


_canonical_conv.defvjp(_forward, _backward)


class Conv2D(hk.Module):
    """``hk.Conv2D`` (VALID, NHWC) through ``conv2d``: the same parameters, names and initial values.

    x: [B, H, W, C] -> [B, Ho, Wo, output_channels]. w_init: Haiku's default when None (a normal of
    standard deviation 1/sqrt(fan in), truncated at two), the bias zeros.
    """

    def __init__(self, output_channels: int, kernel_shape: int, stride: int, w_init=None, name: str = "conv2_d"):
        super().__init__(name=name)
        self.output_channels, self.kernel_shape, self.stride, self.w_init = output_channels, kernel_shape, stride, w_init

    def __call__(self, x: jax.Array) -> jax.Array:
        w_shape = (self.kernel_shape, self.kernel_shape, x.shape[-1], self.output_channels)
        w_init = self.w_init or hk.initializers.TruncatedNormal(stddev=1.0 / np.sqrt(np.prod(w_shape[:-1])))
        w = hk.get_parameter("w", w_shape, x.dtype, init=w_init)
        b = hk.get_parameter("b", (self.output_channels,), x.dtype, init=jnp.zeros)
        return conv2d(x, w, self.stride) + b
