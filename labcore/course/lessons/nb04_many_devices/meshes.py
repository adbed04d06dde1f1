"""The meshes of CPU devices that the device exercises of notebooks 04 and 05 are checked on.

On one device a collective changes nothing and a whole batch on one device is trivially "sharded",
so a wrong answer would pass: the checks draw a mesh of 2 to 8 of this process's CPU devices, and
refuse, with the reason and the flag to set, in a process that has fewer.
"""

from __future__ import annotations

import jax
import numpy as np

PMEAN_AXIS = "devices"  # the mesh axis the data-parallel exercises split the batch over
MIN_DEVICES = 2  # a collective over fewer devices cannot tell a right answer from a wrong one
MAX_DEVICES = 8

CPU_DEVICES_NEEDED = (
    "this check needs a mesh of at least {needed} devices and this process has {have} CPU device(s): "
    "on one device a collective changes nothing and a batch on one device counts as sharded, so a wrong "
    "answer would pass. Set XLA_FLAGS=--xla_force_host_platform_device_count=8 before jax is imported "
    "(the set-up cells of notebooks 04 and 05 do; restart the kernel if jax was imported first)"
)


class NotEnoughDevices(RuntimeError):
    """The check cannot tell right from wrong on this few devices (see CPU_DEVICES_NEEDED)."""


def refuse_small(mesh) -> None:
    if mesh.size < MIN_DEVICES:
        raise NotEnoughDevices(CPU_DEVICES_NEEDED.format(needed=MIN_DEVICES, have=len(jax.devices("cpu"))))


def draw_mesh(rng: np.random.Generator, shuffled: bool = False):
    """A 1-D mesh named PMEAN_AXIS over 2 to 8 of this process's CPU devices (a random count, so an
    answer hard-wired to one count fails); shuffled: the devices in an order other than
    jax.devices("cpu"), as jax.make_mesh may order a TPU's chips by their physical layout.
    A process with one CPU device gets a one-device mesh, which the checkers refuse."""
    from jax.sharding import Mesh

    cpus = jax.devices("cpu")
    count = int(rng.integers(MIN_DEVICES, min(MAX_DEVICES, len(cpus)) + 1)) if len(cpus) >= MIN_DEVICES else 1
    order = np.arange(count)
    while shuffled and count > 1 and np.array_equal(order, np.arange(count)):
        order = rng.permutation(count)
    return Mesh(np.array([cpus[i] for i in order]), (PMEAN_AXIS,))
