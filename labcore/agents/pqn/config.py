"""PQNConfig: every PQN setting, validated on construction, with its CartPole and MinAtar presets.

Its own module, importing no JAX or Haiku, so that the command line can build a flag per field (and
a checkpoint's config be read back) in a fraction of a second; ``labcore.agents.pqn.core``, which
trains with it, re-exports it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from labcore import devices, validation
from labcore.nets import NETWORKS

OPTIMIZERS = ("adam", "radam")


@dataclasses.dataclass(frozen=True)
class PQNConfig:
    """Every PQN setting, validated on construction. Step counts are env steps (one transition).

    Defaults: CartPole-v1 at the size purejaxql uses for its gymnax games (32 envs x 64 steps,
    2 x 128 units with LayerNorm, lambda 0.95); ``PQNConfig.minatar(env_id)`` gives the paper's
    MinAtar settings.
    """

    env_id: str = "CartPole-v1"
    network: str = "mlp"  # 'mlp' for vector observations, 'minatar_cnn' for MinAtar grids
    hidden_sizes: tuple[int, ...] = (128, 128)
    layer_norm: bool = True  # what lets PQN drop the target network; False is there to see why
    num_envs: int = 32
    num_steps: int = 64  # rollout length per env per update
    total_steps: int = 500_000
    learning_rate: float = 1e-4
    anneal_lr: bool = False  # linear decay to 0 over training
    optimizer: str = "radam"  # 'adam' or 'radam' (purejaxql's choice)
    max_grad_norm: float = 10.0
    gamma: float = 0.99
    q_lambda: float = 0.95  # 0: one-step Q-learning targets; 1: returns to the rollout's end
    num_minibatches: int = 16
    update_epochs: int = 4
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    exploration_fraction: float = 0.2  # fraction of total_steps over which epsilon decays
    reward_scale: float = 1.0  # rewards are multiplied by this for learning (reported returns are not)
    bootstrap_truncation: bool = True  # a time-limit end bootstraps from the episode's last observation
    eval_episodes: int = 32
    eval_epsilon: float = 0.0
    seed: int = 0

    # What devices.auto_tune shrinks this config to, per device class. PQN keeps no replay: its memory
    # is the rollout (observations twice, with each step's true next one) and the minibatch
    # gradients, small at MinAtar's 10x10 grids. What grows with num_envs x num_steps is the
    # arithmetic of each update (epochs over every transition), so a CPU keeps the batch of the
    # paper's MinAtar runs at most (128 x 32, here up to 128 x 64) and layers of 256, a small GPU
    # twice that; a T4 caps very large batches; large GPUs and TPUs keep any config.
    DEVICE_SIZES = devices.DeviceSizes(
        limits={
            "cpu": {"hidden_sizes": 256, ("num_envs", "num_steps"): (128, 64)},
            "gpu-small": {"hidden_sizes": 512, ("num_envs", "num_steps"): (256, 64)},
            "gpu-t4": {("num_envs", "num_steps"): (1024, 128)},
            "gpu": {},
            "tpu": {},
        },
        divides={"num_minibatches": ("num_envs", "num_steps")},
    )

    def __post_init__(self) -> None:
        require = validation.requirer(self)
        require(isinstance(self.env_id, str) and bool(self.env_id), "env_id", "a non-empty environment id")
        validation.require_choice(self, "network", tuple(kind for kind in NETWORKS if kind != "nature_cnn"))
        require(
            isinstance(self.hidden_sizes, tuple) and len(self.hidden_sizes) > 0
            and all(validation.is_int(h) and h >= 1 for h in self.hidden_sizes),
            "hidden_sizes",
            "a non-empty tuple of positive layer widths",
        )  # fmt: skip
        validation.require_ints(self, "num_envs", "num_steps", "total_steps", "num_minibatches", "update_epochs", "eval_episodes")
        require(
            (self.num_envs * self.num_steps) % self.num_minibatches == 0,
            "num_minibatches",
            f"a divisor of num_envs * num_steps ({self.num_envs} * {self.num_steps} = {self.num_envs * self.num_steps})",
        )
        require(
            self.total_steps >= self.num_envs * self.num_steps,
            "total_steps",
            f">= num_envs * num_steps ({self.num_envs * self.num_steps}), one update's worth",
        )
        validation.require_positive(self, "learning_rate", "max_grad_norm", "reward_scale")
        validation.require_choice(self, "optimizer", OPTIMIZERS)
        validation.require_unit_interval(self, "gamma", "q_lambda", "epsilon_start", "epsilon_end", "eval_epsilon")
        require(0.0 < self.exploration_fraction <= 1.0, "exploration_fraction", "in (0, 1]")

    @property
    def batch_size(self) -> int:
        """Transitions per update: num_envs * num_steps."""
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        return self.total_steps // self.batch_size

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @classmethod
    def cartpole(cls, **overrides: Any) -> PQNConfig:
        """CartPole-v1: the defaults (purejaxql's gymnax settings), 500k env steps."""
        return cls(**overrides)

    @classmethod
    def minatar(cls, env_id: str = "Breakout-MinAtar", **overrides: Any) -> PQNConfig:
        """The PQN paper's MinAtar settings: 128 envs x 32 steps, 2 epochs of 32 minibatches,
        lambda 0.65, epsilon 1 -> 0.05 over the first 10% of training, lr 5e-4 decayed linearly,
        the MinAtar paper's network (conv 16 3x3, dense 128) with LayerNorm, 10M env steps."""
        settings = dict(
            env_id=env_id,
            network="minatar_cnn",
            hidden_sizes=(128,),
            num_envs=128,
            num_steps=32,
            total_steps=10_000_000,
            learning_rate=5e-4,
            anneal_lr=True,
            q_lambda=0.65,
            num_minibatches=32,
            update_epochs=2,
            exploration_fraction=0.1,
        )
        settings.update(overrides)
        return cls(**settings)

