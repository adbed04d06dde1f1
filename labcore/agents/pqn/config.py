"""PQNConfig: every PQN setting, validated on construction, with its CartPole, MinAtar and Atari presets.

Its own module, importing no JAX or Haiku, so that the command line can build a flag per field (and
a checkpoint's config be read back) in a fraction of a second; ``labcore.agents.pqn.core``, which
trains with it, re-exports it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from labcore import devices, validation
from labcore.nets import NETWORKS

NAME = "pqn"  # the registry's name: the command line's (train NAME) and the one its checkpoints record
OPTIMIZERS = ("adam", "radam")
ENV_STEPPINGS = ("auto", "xla", "callback")  # how an Atari run steps ALE's vector env (labcore.envs.ale_vector)


def is_atari_id(env_id: str) -> bool:
    """An ALE id ('ALE/Breakout-v5'), as ``labcore.envs.atari.is_atari_id`` says (here without gymnasium)."""
    return env_id.startswith("ALE/")


@dataclasses.dataclass(frozen=True)
class PQNConfig:
    """Every PQN setting, validated on construction. Step counts are env steps (one transition).

    Defaults: CartPole-v1 at the sizes of purejaxql's ``pqn_cartpole.yaml`` (32 envs x 64 steps,
    lambda 0.95; ``cartpole`` says where labcore differs), 2 x 128 units with LayerNorm;
    ``PQNConfig.minatar(env_id)`` gives the paper's MinAtar settings, ``PQNConfig.atari(env_id)``
    purejaxql's Atari settings on ALE's vector env and ``PQNConfig.atari_dopamine`` the same with
    Dopamine's sticky actions and whole-game learning.
    """

    env_id: str = "CartPole-v1"
    network: str = "mlp"  # 'mlp' for vector observations, 'minatar_cnn' for MinAtar grids, 'nature_cnn' for Atari
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
    clip_rewards: bool = False  # learning rewards clipped to [-1, 1] (reported returns are not)
    # Atari (ALE ids) only: how the games are played and what ends bootstrapping (labcore.envs.ale_vector)
    repeat_action_probability: float = 0.25  # sticky actions: ALE's v5 ids and Dopamine 0.25, purejaxql 0
    life_loss_terminal: bool = False  # a lost life is terminal for learning; a game is always all its lives
    max_episode_steps: int = 27_000  # agent steps before ALE truncates a game (27,000 = 108,000 frames, 30 minutes of play)
    env_stepping: str = "auto"  # 'xla': ALE's FFI calls inside the program; 'callback': a host callback; 'auto': xla where this JAX runs it
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
        validation.require_choice(self, "network", NETWORKS)
        atari = is_atari_id(self.env_id)
        if atari:
            require(self.network == "nature_cnn", "network", f"'nature_cnn' for an ALE id ({self.env_id})")
        else:
            require(self.network != "nature_cnn", "network", "'mlp' or 'minatar_cnn' ('nature_cnn' plays ALE's Atari frames)")
        require(
            isinstance(self.hidden_sizes, tuple) and len(self.hidden_sizes) > 0
            and all(validation.is_int(h) and h >= 1 for h in self.hidden_sizes),
            "hidden_sizes",
            "a non-empty tuple of positive layer widths",
        )  # fmt: skip
        validation.require_ints(self, "num_envs", "num_steps", "total_steps", "num_minibatches", "update_epochs", "eval_episodes",
                                "max_episode_steps")
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
        if self.network == "nature_cnn":
            require(self.hidden_sizes == (512,), "hidden_sizes", "(512,), the Nature network's one dense layer")
        require(isinstance(self.repeat_action_probability, (int, float)) and 0.0 <= self.repeat_action_probability < 1.0,
                "repeat_action_probability", "in [0, 1)")
        validation.require_choice(self, "env_stepping", ENV_STEPPINGS)
        if not atari:  # settings of ALE's emulators: refused where they would be ignored
            defaults = {field.name: field.default for field in dataclasses.fields(self)}
            for field in ("repeat_action_probability", "life_loss_terminal", "max_episode_steps", "env_stepping"):
                require(getattr(self, field) == defaults[field], field, f"left at {defaults[field]!r}: it sets ALE's Atari games, and env_id is not an ALE id")

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
    def smallest(cls, **overrides: Any) -> PQNConfig:
        """The smallest run that trains and evaluates: CartPole-v1, 8 envs x 16 steps, 4 updates, 32 x 2 hidden
        units. For tests and a first try of the whole lifecycle (seconds on a CPU), not for learning anything."""
        return cls(**{**dict(num_envs=8, num_steps=16, total_steps=8 * 16 * 4, num_minibatches=4, hidden_sizes=(32, 32),
                             eval_episodes=4), **overrides})

    @classmethod
    def cartpole(cls, **overrides: Any) -> PQNConfig:
        """CartPole-v1: the defaults, 500k env steps. The sizes are purejaxql's ``pqn_cartpole.yaml`` at 970ecce (32 envs x 64
        steps, 4 epochs of 16 minibatches, lambda 0.95, lr 1e-4, gamma 0.99); unlike it, 128 hidden units (256
        there), epsilon down to 0.05 (0.2 there), no reward scaling (0.1 there) and no learning-rate decay."""
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

    @classmethod
    def atari(cls, env_id: str = "ALE/Breakout-v5", **overrides: Any) -> PQNConfig:
        """purejaxql's Atari settings (``purejaxql/config/alg/pqn_atari.yaml`` at 0436c80): 128 envs x 32 steps,
        2 epochs of 32 minibatches, lambda 0.65, RAdam at 2.5e-4 without decay, max grad norm 10,
        epsilon 1 -> 0.001 over the first 10% of training, the Nature network with LayerNorm, and, as
        purejaxql trains, a lost life terminal, rewards clipped and no sticky actions. ALE's vector env
        presses FIRE and then plays 0 to 28 no-ops when a game starts (its draw for noop_max 30 counts
        the FIRE as one; ``src/ale/vector/preprocessed_env.cpp`` of ALE v0.12.1).
        2.5M agent steps = 10M frames (purejaxql's runs are 1e7 agent steps, 40M frames, so its epsilon
        decays over 4M frames, this preset's over 1M). Evaluation: 32 whole games, unclipped, at epsilon
        0.001 (Dopamine's evaluation epsilon), cut at 27,000 agent steps as ALE's v5 games are."""
        settings = dict(
            env_id=env_id,
            network="nature_cnn",
            hidden_sizes=(512,),
            num_envs=128,
            num_steps=32,
            total_steps=2_500_000,
            learning_rate=2.5e-4,
            anneal_lr=False,
            optimizer="radam",
            max_grad_norm=10.0,
            gamma=0.99,
            q_lambda=0.65,
            num_minibatches=32,
            update_epochs=2,
            epsilon_start=1.0,
            epsilon_end=0.001,
            exploration_fraction=0.1,
            clip_rewards=True,
            repeat_action_probability=0.0,
            life_loss_terminal=True,
            eval_episodes=32,
            eval_epsilon=0.001,
        )
        settings.update(overrides)
        return cls(**settings)

    @classmethod
    def atari_dopamine(cls, env_id: str = "ALE/Breakout-v5", **overrides: Any) -> PQNConfig:
        """``atari``'s PQN settings under Dopamine's Atari protocol (Machado et al., 2018, as Dopamine's
        baselines run it): sticky actions with probability 0.25 and no life-loss terminal, so each
        game is learned from as the whole game it is; rewards still clipped (Dopamine's agents clip)."""
        return cls.atari(env_id, **{"repeat_action_probability": 0.25, "life_loss_terminal": False, **overrides})
