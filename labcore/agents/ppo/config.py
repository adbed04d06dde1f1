"""PPOConfig: every PPO setting, validated on construction, with its CartPole preset.

Its own module, importing no JAX, so that the command line can build a flag per field (and a
checkpoint's config be read back) in a fraction of a second; ``labcore.agents.ppo.core``, which
trains with it, re-exports it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from labcore import devices, validation

NAME = "ppo"  # the registry's name: the command line's (train NAME) and the one its checkpoints record
ACTIVATIONS = ("tanh", "relu")
COMPUTE_DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Every PPO setting, validated on construction. Defaults: masked PPO on Vault-v0 at a GPU's size
    (256 envs x 128 steps, 256x2 units; ``devices.auto_tune`` shrinks it to smaller devices)."""

    env_id: str = "Vault-v0"
    num_envs: int = 256
    num_steps: int = 128  # rollout length per env per update
    total_steps: int = 10_000_000
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True  # linear decay to 0 over training
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    clip_eps: float = 0.2
    vf_coef: float = 0.5
    # 0.01 is the value of CleanRL's cleanrl/ppo.py (--ent-coef default) and of PureJaxRL's purejaxrl/ppo.py
    # (ENT_COEF in its CartPole-v1 config); cartpole() below uses it
    ent_coef: float = 0.1
    max_grad_norm: float = 0.5
    hidden_size: int = 256
    num_layers: int = 2
    activation: str = "tanh"
    normalize_advantages: bool = True  # per minibatch
    mask_actions: bool = True  # False: the agent may pick illegal actions (the env penalises them)
    bootstrap_truncation: bool = True  # a time-limit end bootstraps from the final observation's value
    # 'bfloat16': the network's matmuls and activations run in bfloat16; parameters, optimizer
    # state and the loss stay float32 (see labcore.nets.actor_critic)
    compute_dtype: str = "float32"
    eval_episodes: int = 64  # greedy, sampled and random episodes played by the evaluation at the end
    seed: int = 0

    # What devices.auto_tune shrinks this config to, per device class. The batch (num_envs x
    # num_steps) is what fills memory: the rollout and its gradients scale with it. The ceilings are
    # sizes with headroom, not measured limits: 64 envs x 128 steps x 256 units for a T4 (16 GB),
    # 32 x 64 x 128 for GPUs of 8 GiB or less. On a CPU the network's matmuls are
    # the cost (about 6.5 MFLOP per env step at 256 units), so a few cores want 128 units and a
    # 64-env batch to keep updates frequent. A TPU v5e chip (16 GiB of HBM) and large GPUs keep the
    # defaults. num_minibatches must keep dividing the batch.
    DEVICE_SIZES = devices.DeviceSizes(
        limits={
            "cpu": {"hidden_size": 128, ("num_envs", "num_steps"): (64, 128)},
            "gpu-small": {"hidden_size": 128, ("num_envs", "num_steps"): (32, 64)},
            "gpu-t4": {"hidden_size": 256, ("num_envs", "num_steps"): (64, 128)},
            "gpu": {},
            "tpu": {},
        },
        divides={"num_minibatches": ("num_envs", "num_steps")},
    )

    def __post_init__(self) -> None:
        require = validation.requirer(self)

        require(isinstance(self.env_id, str) and bool(self.env_id), "env_id", "a non-empty environment id")
        validation.require_ints(self, "num_envs", "num_steps", "total_steps", "num_minibatches", "update_epochs", "hidden_size", "num_layers",
                                 "eval_episodes")
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
        require(math.isfinite(self.learning_rate) and self.learning_rate > 0, "learning_rate", "> 0")
        require(0.0 <= self.gamma <= 1.0, "gamma", "in [0, 1]")
        require(0.0 <= self.gae_lambda <= 1.0, "gae_lambda", "in [0, 1]")
        require(self.clip_eps > 0, "clip_eps", "> 0")
        require(self.vf_coef >= 0, "vf_coef", ">= 0")
        require(self.ent_coef >= 0, "ent_coef", ">= 0")
        require(self.max_grad_norm > 0, "max_grad_norm", "> 0")
        require(self.activation in ACTIVATIONS, "activation", f"one of {ACTIVATIONS}")
        require(self.compute_dtype in COMPUTE_DTYPES, "compute_dtype", f"one of {COMPUTE_DTYPES}")

    @property
    def num_updates(self) -> int:
        return self.total_steps // (self.num_envs * self.num_steps)

    @property
    def minibatch_size(self) -> int:
        return self.num_envs * self.num_steps // self.num_minibatches

    @classmethod
    def smallest(cls, **overrides: Any) -> PPOConfig:
        """The smallest run that trains and evaluates: Vault-v0 (the masked path), 8 envs x 16 steps, 4 updates, 32
        hidden units. For tests and a first try of the whole lifecycle (seconds on a CPU), not for learning
        anything."""
        return cls(**{**dict(env_id="Vault-v0", num_envs=8, num_steps=16, total_steps=8 * 16 * 4, hidden_size=32,
                             eval_episodes=4), **overrides})

    @classmethod
    def cartpole(cls, **overrides: Any) -> PPOConfig:
        """PureJaxRL's CartPole-v1 settings: 4 envs x 128 steps, 500k steps, 64 x 2 tanh, ent 0.01."""
        settings = dict(
            env_id="CartPole-v1", num_envs=4, num_steps=128, total_steps=500_000, ent_coef=0.01, hidden_size=64
        )
        settings.update(overrides)
        return cls(**settings)
