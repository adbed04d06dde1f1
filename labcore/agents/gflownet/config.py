"""GFlowNetConfig: every GFlowNet setting, validated on construction; shared by the four trainers.

Its own module, importing no JAX, so that the command line can build a flag per field (and a
checkpoint's config be read back) in a fraction of a second; ``labcore.agents.gflownet.core``,
which trains with it, re-exports it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from labcore import devices, validation

if TYPE_CHECKING:
    from labcore.envs.hypergrid import HyperGrid

NAME = "gflownet"  # the registry's name: the command line's (train NAME) and the one its checkpoints record
LOSSES = ("tb", "db", "fm", "fl", "subtb")
TRAINERS = ("torch", "hybrid", "jax_policy", "jax")


@dataclasses.dataclass(frozen=True)
class GFlowNetConfig:
    """Every GFlowNet setting, validated on construction; shared by the four trainers."""

    ndim: int = 2
    height: int = 8
    loss: str = "tb"  # one of LOSSES
    trainer: str = "torch"  # one of TRAINERS
    batch_size: int = 16  # trajectories per iteration
    iterations: int = 2_000
    learning_rate: float = 1e-3
    log_z_learning_rate: float = 1e-1  # logZ learns faster than the networks (TB)
    hidden_size: int = 256
    num_layers: int = 2
    uniform_backward: bool = False  # True: P_B uniform over parents; False: learned
    exploration_epsilon: float = 0.0  # probability of a uniformly random legal action while sampling
    subtb_lambda: float = 0.9
    l1_samples: int = 20_000  # the L1 metric uses the last this many sampled terminal states
    seed: int = 0

    # What devices.auto_tune shrinks this config to, per device class. A batch of B trajectories
    # on a HyperGrid evaluates the networks at B x (ndim * (height - 1) + 2) states; at 256 units
    # that is about 0.5 MFLOP per state forward and backward, so on a few CPU cores a batch of
    # 64 trajectories keeps an iteration in milliseconds. On a GPU the activations and their
    # gradients (about 100 KB per trajectory at ndim 4, height 8) set the ceiling: 1,024
    # trajectories for 8 GiB or less, 4,096 for a T4. TPU v5e and large GPUs keep the config.
    DEVICE_SIZES = devices.DeviceSizes(
        limits={
            "cpu": {"batch_size": 64, "hidden_size": 256},
            "gpu-small": {"batch_size": 1024},
            "gpu-t4": {"batch_size": 4096},
            "gpu": {},
            "tpu": {},
        }
    )

    def __post_init__(self) -> None:
        require = validation.requirer(self)

        validation.require_ints(self, "ndim", "batch_size", "iterations", "hidden_size", "num_layers", "l1_samples")
        require(isinstance(self.height, int) and self.height >= 2, "height", "an integer >= 2")
        require(self.loss in LOSSES, "loss", f"one of {LOSSES}")
        require(self.trainer in TRAINERS, "trainer", f"one of {TRAINERS}")
        for field in ("learning_rate", "log_z_learning_rate"):
            require(math.isfinite(getattr(self, field)) and getattr(self, field) > 0, field, "> 0")
        require(0.0 <= self.exploration_epsilon <= 1.0, "exploration_epsilon", "in [0, 1]")
        require(0.0 < self.subtb_lambda <= 1.0, "subtb_lambda", "in (0, 1]")

    @property
    def grid(self) -> HyperGrid:
        """The ``ndim`` x ``height`` HyperGrid (``labcore.envs.hypergrid``)."""
        # imported here: the grid's module imports JAX, which this module must not at import time
        from labcore.envs.hypergrid import HyperGrid

        return HyperGrid(self.ndim, self.height)

    @classmethod
    def smallest(cls, **overrides: Any) -> GFlowNetConfig:
        """The smallest run that trains and evaluates: the jitted trainer on a 2-D grid of height 4, 4 iterations of
        8 trajectories, 16 hidden units. For tests and a first try of the whole lifecycle (seconds on a CPU), not
        for learning anything."""
        return cls(**{**dict(trainer="jax", ndim=2, height=4, hidden_size=16, batch_size=8, iterations=4, l1_samples=20),
                      **overrides})

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
