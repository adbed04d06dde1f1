"""DQNConfig: every DQN setting, validated on construction, with its Nature Atari, short-budget
Atari and MinAtar presets; and the settings of the DQN drivers the command line offers as flags
(``ActorLearnerSettings``, ``HostLoopSettings``, ``DataParallelSettings``), each default written once.

Its own module, importing no JAX or Haiku, so that the command line can build a flag per field (and
a checkpoint's config be read back) in a fraction of a second; ``labcore.agents.dqn.core``, which
trains with it, re-exports it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from labcore import devices, validation
from labcore.nets import NETWORKS

# The registry's names of DQN's four drivers: the command line's (train NAME) and the ones their checkpoints record
SCAN_NAME, HOST_LOOP_NAME, DATA_PARALLEL_NAME, ACTOR_LEARNER_NAME = (
    "dqn-scan", "dqn-host", "dqn-data-parallel", "dqn-actor-learner")
OPTIMIZERS = ("adam", "rmsprop_centered")
REPLAY_STORAGES = ("transitions", "frames")
TD_LOSSES = ("mse", "huber")


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """Every DQN setting, validated on construction.

    Step counts are agent steps (one action chosen, one transition stored).
    Defaults are a CartPole configuration; ``DQNConfig.nature_atari()`` gives
    the Nature paper's Atari settings.
    """

    env_id: str = "CartPole-v1"
    network: str = "mlp"  # 'mlp' for vector observations, 'nature_cnn' for Atari frames, 'minatar_cnn' for MinAtar grids
    hidden_sizes: tuple[int, ...] = (120, 84)  # the dense layers of 'mlp' and 'minatar_cnn'
    total_steps: int = 200_000
    buffer_size: int = 10_000
    batch_size: int = 128
    gamma: float = 0.99
    learning_rate: float = 2.5e-4
    optimizer: str = "adam"  # or 'rmsprop_centered' (the Nature paper's)
    adam_eps: float = 1e-8
    learning_starts: int = 10_000
    train_frequency: int = 10  # one update every this many agent steps
    target_update_frequency: int = 500  # agent steps between target updates
    target_update_rate: float = 1.0  # 1.0: hard copy; < 1: Polyak averaging at each target update
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    exploration_fraction: float = 0.5  # fraction of total_steps over which epsilon decays
    double_dqn: bool = False
    max_grad_norm: float | None = None  # None: no clipping
    # 'mse' (0.5 td^2), the default for unclipped rewards such as CartPole's: its gradient grows with
    # the error, where Huber's stops at huber_delta. 'huber' is the Nature DQN's error clipping to
    # [-1, 1] (Mnih et al. 2015, Methods), made for Atari's rewards clipped to [-1, 1].
    td_loss: str = "mse"
    huber_delta: float = 1.0
    num_envs: int = 1  # envs stepped together; each step adds num_envs transitions
    replay_storage: str = "transitions"  # or 'frames': Atari frames stored once (labcore.agents.dqn.frame_replay)
    life_loss_terminal: bool = True  # Atari, training only: a lost life ends bootstrapping
    repeat_action_probability: float = 0.25  # Atari sticky actions (ALE v5 default)
    eval_episodes: int = 20
    eval_epsilon: float = 0.05
    seed: int = 0

    # What devices.auto_tune shrinks this config to, per device class. The replay buffer lives on
    # the default device (jnp arrays), so on a GPU it competes with the network for memory: Atari
    # frames stored once take about 7.1 KB per transition (1M: 7.1 GB; frame_replay.bytes_needed),
    # so a GPU of 8 GiB or less keeps 250k (1.8 GB) and a T4 (15 GB, of which JAX preallocates 75%)
    # 500k (3.6 GB), leaving room for the network and XLA's scratch space. On a CPU the buffer is
    # in host memory (1M frames need 7.1 GB of it) and the cost is
    # arithmetic per update (batch x layer widths) and per env step on few cores. TPU v5e (16 GiB)
    # and large GPUs keep the config.
    DEVICE_SIZES = devices.DeviceSizes(
        limits={
            "cpu": {"buffer_size": 1_000_000, "batch_size": 128, "hidden_sizes": 256, "num_envs": 8},
            "gpu-small": {"buffer_size": 250_000, "batch_size": 256, "hidden_sizes": 512},
            "gpu-t4": {"buffer_size": 500_000, "batch_size": 512},
            "gpu": {},
            "tpu": {},
        }
    )

    def __post_init__(self) -> None:
        require = validation.requirer(self)

        require(isinstance(self.env_id, str) and bool(self.env_id), "env_id", "a non-empty environment id")
        require(self.network in NETWORKS, "network", f"one of {NETWORKS}")
        require(
            len(self.hidden_sizes) > 0 and all(int(h) >= 1 for h in self.hidden_sizes),
            "hidden_sizes",
            "a non-empty sequence of positive layer widths",
        )
        validation.require_ints(self, "total_steps", "buffer_size", "batch_size", "train_frequency", "target_update_frequency")
        require(self.learning_starts >= 0, "learning_starts", ">= 0")
        require(self.batch_size <= self.buffer_size, "batch_size", f"<= buffer_size ({self.buffer_size})")
        require(0.0 <= self.gamma <= 1.0, "gamma", "in [0, 1]")
        require(math.isfinite(self.learning_rate) and self.learning_rate > 0, "learning_rate", "> 0")
        require(self.optimizer in OPTIMIZERS, "optimizer", f"one of {OPTIMIZERS}")
        require(self.adam_eps > 0, "adam_eps", "> 0")
        require(0.0 < self.target_update_rate <= 1.0, "target_update_rate", "in (0, 1]")
        require(0.0 <= self.epsilon_start <= 1.0, "epsilon_start", "in [0, 1]")
        require(0.0 <= self.epsilon_end <= 1.0, "epsilon_end", "in [0, 1]")
        require(0.0 < self.exploration_fraction <= 1.0, "exploration_fraction", "in (0, 1]")
        require(self.max_grad_norm is None or self.max_grad_norm > 0, "max_grad_norm", "> 0 or None")
        require(self.td_loss in TD_LOSSES, "td_loss", f"one of {TD_LOSSES}")
        require(self.huber_delta > 0, "huber_delta", "> 0")
        require(isinstance(self.num_envs, int) and self.num_envs >= 1, "num_envs", "an integer >= 1")
        require(self.replay_storage in REPLAY_STORAGES, "replay_storage", f"one of {REPLAY_STORAGES}")
        if self.replay_storage == "frames":
            require(self.network == "nature_cnn", "replay_storage", "'transitions' unless network is 'nature_cnn'")
            require(self.num_envs == 1, "num_envs", "1 with replay_storage='frames' (one frame stream per buffer)")
        require(0.0 <= self.repeat_action_probability < 1.0, "repeat_action_probability", "in [0, 1)")
        require(isinstance(self.eval_episodes, int) and self.eval_episodes >= 1, "eval_episodes", "an integer >= 1")
        require(0.0 <= self.eval_epsilon <= 1.0, "eval_epsilon", "in [0, 1]")

    @classmethod
    def nature_atari(cls, env_id: str = "ALE/Breakout-v5", **overrides: Any) -> DQNConfig:
        """The Nature DQN's Atari hyperparameters (Mnih et al. 2015, Extended Data Table 1), with these
        differences: 10M agent steps = 40M frames (the paper trains 50M frames); Adam at lr 2.5e-4 (the
        paper: RMSProp, ``optimizer='rmsprop_centered'`` here); the target copied every 10,000 agent
        steps (the paper: every 10,000 parameter updates, 40,000 agent steps); and ALE v5's sticky
        actions, 0.25, with FIRE pressed at a reset (the paper's games had neither). Counts are agent steps;
        1 agent step = 4 frames."""
        settings = dict(
            env_id=env_id,
            network="nature_cnn",
            total_steps=10_000_000,
            buffer_size=1_000_000,
            batch_size=32,
            learning_rate=2.5e-4,
            learning_starts=50_000,
            train_frequency=4,
            target_update_frequency=10_000,
            epsilon_start=1.0,
            epsilon_end=0.1,
            exploration_fraction=0.1,  # 1M of 10M steps
            max_grad_norm=None,
            td_loss="huber",
            replay_storage="frames",
            eval_epsilon=0.05,
        )
        settings.update(overrides)
        return cls(**settings)

    @classmethod
    def atari_short(cls, env_id: str = "ALE/Breakout-v5", total_steps: int = 250_000, **overrides: Any) -> DQNConfig:
        """The Nature network and preprocessing with ``nature_atari``'s Huber TD loss, scheduled for a short budget.

        The Nature schedule assumes 10M steps: its epsilon would still be 0.78 after 250k.
        Here exploration ends at 40% of the run, learning starts after 20k steps, the target
        follows every 2,000 steps, Adam with lr 1e-4 and eps 1.5e-4 (the eps of Dopamine's JAX DQN, whose
        lr is 6.25e-5: dopamine/jax/agents/dqn/configs/dqn.gin),
        and the buffer holds the whole run.
        """
        settings = dict(
            total_steps=total_steps,
            buffer_size=min(1_000_000, total_steps),
            learning_rate=1e-4,
            adam_eps=1.5e-4,
            learning_starts=min(20_000, total_steps // 10),
            target_update_frequency=2_000,
            epsilon_end=0.01,
            exploration_fraction=0.4,
        )
        settings.update(overrides)
        return cls.nature_atari(env_id, **settings)

    @classmethod
    def smallest(cls, **overrides: Any) -> DQNConfig:
        """The smallest run that trains and evaluates: CartPole-v1, 1,200 steps learning from step 500, a 1,000-step
        replay, 32 hidden units; every DQN driver takes it. For tests and a first try of the whole lifecycle
        (seconds on a CPU), not for learning anything."""
        return cls(**{**dict(total_steps=1_200, learning_starts=500, buffer_size=1_000, batch_size=32, hidden_sizes=(32,),
                             eval_episodes=4), **overrides})

    @classmethod
    def minatar(cls, env_id: str = "Breakout-MinAtar", total_steps: int = 5_000_000, **overrides: Any) -> DQNConfig:
        """The MinAtar paper's DQN (Young & Tian, 2019; its ``examples/dqn.py``) for a gymnax MinAtar id.

        Conv 16 3x3 -> dense 128; one update of 32 transitions per agent step; a 100k replay
        filled for 5k steps first; target copied every 1,000 updates; epsilon 1 -> 0.1 over the
        first 100k steps; Huber loss, centred RMSProp at lr 2.5e-4, gamma 0.99; 5M steps. Evaluation
        is greedy.
        """
        settings = dict(
            env_id=env_id,
            network="minatar_cnn",
            hidden_sizes=(128,),
            total_steps=total_steps,
            buffer_size=100_000,
            batch_size=32,
            learning_rate=2.5e-4,
            optimizer="rmsprop_centered",
            learning_starts=5_000,
            train_frequency=1,
            target_update_frequency=1_000,
            epsilon_start=1.0,
            epsilon_end=0.1,
            exploration_fraction=min(1.0, 100_000 / total_steps),
            td_loss="huber",
            eval_epsilon=0.0,  # greedy, as PQN's evaluation
        )
        settings.update(overrides)
        return cls(**settings)


def _setting(default: Any, text: str) -> Any:
    """A driver setting's field: its default, and its help (the flag's) in the field's metadata."""
    return dataclasses.field(default=default, metadata={"help": text})


EXPLORATIONS = ("linear", "ape_x")  # the actor-learner's exploration schedules


@dataclasses.dataclass(frozen=True)
class ActorLearnerSettings:
    """The keywords of ``labcore.agents.dqn.actor_learner.train`` the command line offers as flags of ``train
    dqn-actor-learner``, each with its default and its help: ``train``'s keywords default to these, and the
    registry reads its flags from here (``labcore.agents.contract.settings_of``). ``train`` builds one from its
    keywords, which checks them before Ray starts (a bad value fails naming its field), and passes it down."""

    address: str | None = _setting(None, "Ray cluster to join: 'auto' (the one `ray start` runs on this machine) "
                                         "or HEAD_IP:PORT; default: start Ray here, listening on 127.0.0.1 only")
    num_actors: int = _setting(2, "Ray actors, spread over the cluster's nodes")
    envs_per_actor: int = _setting(4, "gymnax envs each actor steps")
    rollout_steps: int = _setting(32, "steps of each rollout an actor returns")
    broadcast_every: int = _setting(10, "learner updates between parameter copies")
    max_restarts: int = _setting(3, "times Ray restarts an actor that died")
    cpus_per_actor: float = _setting(1.0, "Ray CPUs each actor reserves")
    stall_timeout_s: float = _setting(120.0, "seconds without any rollout before the run stops (actors that cannot "
                                             "be placed)")
    actor_deadline_s: float | None = _setting(60.0, "seconds an actor may go without delivering a rollout before it "
                                                    "is killed and restarted (its first after a start: at least three "
                                                    "times the slowest first one measured)")
    timeout_s: float | None = _setting(None, "seconds for the whole run (default: no limit)")
    exploration: str = _setting("linear", "the actors' epsilon: 'linear' (the config's schedule, one rate for all) "
                                          "or 'ape_x' (a constant rate per actor, 0.4 ** (1 + 7 i / (N - 1)))")

    def __post_init__(self) -> None:
        validation.require_ints(self, "num_actors", "envs_per_actor", "rollout_steps", "broadcast_every")
        validation.require_ints(self, "max_restarts", minimum=0)
        validation.require_positive(self, "cpus_per_actor", "stall_timeout_s")
        for name in ("actor_deadline_s", "timeout_s"):  # None: no limit
            if getattr(self, name) is not None:
                validation.require_positive(self, name)
        validation.require_choice(self, "exploration", EXPLORATIONS)


ACTOR_LEARNER = ActorLearnerSettings()


@dataclasses.dataclass(frozen=True)
class HostLoopSettings:
    """The keyword of ``labcore.agents.dqn.host_loop.train`` the command line offers as a flag of ``train
    dqn-host``."""

    save_replay: bool = _setting(True, "keep the replay buffer and the envs in checkpoints (an exact resume; "
                                       "--no-save-replay: smaller checkpoints)")


@dataclasses.dataclass(frozen=True)
class DataParallelSettings:
    """The keyword of ``labcore.agents.dqn.multi_process.train`` the command line offers as a flag of ``train
    dqn-data-parallel``."""

    replicas_per_device: int = _setting(1, "DQN replicas on each device (8 on 1 device run as 1 on each of 8)")


HOST_LOOP, DATA_PARALLEL = HostLoopSettings(), DataParallelSettings()
