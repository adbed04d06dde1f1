"""The four run modes of the multi-agent IQN experiment, from the original's structure to one compiled program.

Each runner plays epochs of ``IQNRunConfig`` in its mode and reports host numbers
(``EpochNumbers``); ``labcore.agents.iqn.run.train`` drives a host runner and turns its numbers into metric
rows. The experiment is that of sorrel's ``treasurehunt`` example: ``n_agents`` independent
iRainbow learners in one world, and for every epoch

    reset the world; every agent start_epoch (add_empty; hard target sync when
    epoch % target_sync_epochs == 0, epoch 0 included); max_turns turns (the rule of one turn:
    ``labcore.agents.iqn.programs``); one train step per agent whose buffer allows it; every
    agent's epsilon decays.

The modes (``IQNRunConfig.mode``, ``RUNNERS``):

* ``pytorch`` (``PytorchRunner``): the object-style Python world (``labcore.torch_ref.treasurehunt``)
  and one PyTorch ``IRainbowAgent`` per agent, everything one after another, as the original does.
  Its own generators: the world's numpy generator seeded with ``seed``, agent i's torch, numpy and
  Python generators seeded from ``(seed, i)`` (``pytorch_agent_seed``).
* ``jax_sequential`` (``JaxSequentialRunner``): the Python world and one JAX ``AgentState`` per
  agent; each agent's jitted ``act`` / ``remember`` / ``learn`` (``labcore.agents.iqn.core``) is
  called one by one.
* ``jax_parallel`` (``JaxParallelRunner``): the agents stacked on a leading axis; per turn ONE
  jitted call (the JAX world's turn, vmapped acting, vmapped buffer writes), at the epoch's end one
  vmapped ``learn``.
* ``jax_fused`` (``JaxFusedRunner``): a whole epoch (reset, the turns as a ``lax.scan``, buffer
  writes, the train steps, epsilon decay) is one jitted function, acting vmapped over agents, the
  whole epoch vmapped over ``num_worlds`` independent worlds (each with its own agents);
  ``epochs_per_call`` epochs per call (a scan over epochs) remove the per-epoch dispatch. The state
  is donated, so the replay buffers are updated in place. The train steps run one agent after
  another inside the program (``programs.fused_epoch`` says why).

The three JAX modes share the key schedule of ``labcore.agents.iqn.programs`` and play the same
game. Every runner's ``params()`` are the agents' local parameters in the Flax layout of
``labcore.nets.iqn.IQN``, stacked ([n_agents, ...]; [num_worlds, n_agents, ...] when num_worlds > 1):
the pytorch mode converts its networks with the bridge ``iqn_params_to_flax``.
"""

from __future__ import annotations

import functools
import time
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from labcore.agents.iqn import core as iqn
from labcore.agents.iqn.programs import (EpochKeys, compile_lowered, end_epoch_all, epoch_keys, first_world,
                                         fused_epochs, init_world_runs, own_buffers, play_turn, start_epoch_all,
                                         world_keys)
from labcore.agents.iqn.run_config import WORLD_FIELDS, IQNRunConfig
from labcore.agents.iqn.torch_reference import reference_agent
from labcore.envs import treasurehunt as th


# jax_parallel: three jitted calls per epoch (start, one per turn, end), the agents donated to each.


class _TurnTotals(NamedTuple):
    rewards: jax.Array  # f32[n]: each agent's reward so far this epoch
    gems: jax.Array  # i32[]


@functools.partial(jax.jit, static_argnames=("agent_config", "world_params"), donate_argnums=0)
def _parallel_start(agents: iqn.AgentState, run_key: jax.Array, epoch: jax.Array, agent_config: iqn.IQNConfig,
                    world_params: th.TreasurehuntParams):
    keys = epoch_keys(run_key, epoch, world_params.n_agents, world_params.max_turns)
    totals = _TurnTotals(jnp.zeros((world_params.n_agents,), jnp.float32), jnp.int32(0))
    return start_epoch_all(agents, epoch, agent_config), th.reset(keys.reset, world_params), keys, totals


@functools.partial(jax.jit, static_argnames=("agent_config", "world_params"), donate_argnums=(0, 1, 3))
def _parallel_turn(world: th.WorldState, agents: iqn.AgentState, keys: EpochKeys, totals: _TurnTotals,
                   agent_config: iqn.IQNConfig, world_params: th.TreasurehuntParams):
    # The world's turn counter picks this turn's keys on the device: no host-side indexing per turn.
    t = world.turn
    world, agents, rewards, gems = play_turn(world, agents, keys.spawn[t], keys.act[t], agent_config, world_params)
    return world, agents, _TurnTotals(totals.rewards + rewards, totals.gems + gems)


@functools.partial(jax.jit, static_argnames=("agent_config",), donate_argnums=0)
def _parallel_end(agents: iqn.AgentState, keys: EpochKeys, agent_config: iqn.IQNConfig):
    epsilon = agents.epsilon
    agents, losses = jax.vmap(functools.partial(iqn.learn, config=agent_config))(agents, keys.learn)
    return end_epoch_all(agents, agent_config), losses, epsilon


# jax_sequential: the per-epoch draws for the Python world, and jitted per-agent epoch hooks.


@functools.partial(jax.jit, static_argnames=("world_params",))
def _sequential_draws(run_key: jax.Array, epoch: jax.Array, world_params: th.TreasurehuntParams):
    """(agent positions i32[n, 2], spawn uniforms f32[T, H, W], keys) for the Python world."""
    keys = epoch_keys(run_key, epoch, world_params.n_agents, world_params.max_turns)
    positions = th.reset(keys.reset, world_params).agent_pos
    uniforms = jax.vmap(lambda k: th.spawn_uniforms(k, world_params))(keys.spawn)
    return positions, uniforms, keys


_start_one = jax.jit(iqn.start_epoch, static_argnames=("config",))
_end_one = jax.jit(iqn.end_epoch, static_argnames=("config",))


# ----------------------------------------------------------------------------------------------
# The four runners. Each plays epochs and reports host numbers; ``run`` turns them into rows.


class EpochNumbers(NamedTuple):
    """Host numbers of k finished epochs of W worlds and n agents: gems [k, W]; rewards [k, W, n]
    (each agent's summed reward); losses [k, W, n] (NaN: did not train); epsilon [k] (used during
    the epoch); seconds [k] (wall time per epoch)."""

    gems: np.ndarray
    rewards: np.ndarray
    losses: np.ndarray
    epsilon: np.ndarray
    seconds: np.ndarray


def _one_epoch(gems: int, rewards: np.ndarray, losses: np.ndarray, epsilon: float, seconds: float) -> EpochNumbers:
    """EpochNumbers of one epoch of one world (rewards, losses: [n])."""
    return EpochNumbers(np.array([[gems]], np.int64), np.asarray(rewards, np.float64)[None, None],
                        np.asarray(losses, np.float64)[None, None], np.array([epsilon], np.float64),
                        np.array([seconds], np.float64))


class Runner(Protocol):
    """A mode's loop: ``run_epochs(k)`` plays k more epochs (k <= ``epochs_per_call`` except in the
    fused mode, which compiles for larger chunks) and returns their numbers; ``params()`` the
    agents' stacked local parameters; ``compile_s`` the seconds spent compiling."""

    epochs_per_call: int
    compile_s: float

    def run_epochs(self, k: int) -> EpochNumbers: ...

    def params(self) -> Any: ...


def _one_at_a_time(k: int) -> None:
    if k != 1:
        raise ValueError(f"this mode plays one epoch per call, got a chunk of {k} (epochs_per_call is jax_fused only)")


def pytorch_agent_seed(seed: int, agent: int) -> int:
    """Agent ``agent``'s seed in the pytorch mode: distinct for every (seed, agent) pair."""
    return int(np.random.SeedSequence((seed, agent)).generate_state(1)[0])


def _python_world(config: IQNRunConfig):
    from labcore.torch_ref.treasurehunt import TreasurehuntWorld

    return TreasurehuntWorld(**{name: getattr(config.world, name) for name in WORLD_FIELDS}, seed=config.seed)


class PytorchRunner:
    """The original's loop: the Python world and one PyTorch IRainbowAgent per agent, one after another."""

    epochs_per_call = 1

    def __init__(self, config: IQNRunConfig) -> None:
        self.config, self.epoch, self.compile_s = config, 0, 0.0
        self.world = _python_world(config)  # its own generator draws the positions and the gems
        self.agents = [reference_agent(config.agent, seed=pytorch_agent_seed(config.seed, i))
                       for i in range(config.world.n_agents)]

    def run_epochs(self, k: int) -> EpochNumbers:
        _one_at_a_time(k)
        started = time.perf_counter()
        world, agents = self.world, self.agents
        world.reset()
        for agent in agents:
            agent.start_epoch(self.epoch)
        gems, rewards = 0, np.zeros(len(agents))
        for _ in range(self.config.world.max_turns):
            world.spawn_gems()
            before = world.gems_on_map()
            observations = [world.observe(i) for i in range(len(agents))]
            actions = [agent.take_action(obs) for agent, obs in zip(agents, observations)]
            step_rewards = [world.move(i, action) for i, action in enumerate(actions)]
            for agent, obs, action, reward in zip(agents, observations, actions, step_rewards):
                agent.buffer.add(obs, action, reward, 0.0)
            rewards += step_rewards
            gems += before - world.gems_on_map()
        epsilon = agents[0].epsilon
        losses = [agent.train_step() for agent in agents]
        for agent in agents:
            agent.end_epoch()
        self.epoch += 1
        losses = np.array([np.nan if loss is None else loss for loss in losses])
        return _one_epoch(gems, rewards, losses, epsilon, time.perf_counter() - started)

    def params(self) -> Any:
        """The local networks in the Flax layout (the bridge), stacked: leaves [n_agents, ...]."""
        from labcore.torch_ref.irainbow_network import iqn_params_to_flax

        per_agent = [iqn_params_to_flax(agent.local) for agent in self.agents]
        return jax.tree_util.tree_map(lambda *leaves: np.stack(leaves), *per_agent)


class JaxSequentialRunner:
    """The Python world and one JAX AgentState per agent; each agent's jitted act / remember / learn
    (``learn`` compiled ahead of time with ``CPU_COMPILER_OPTIONS``) is called one by one. The
    world's reset positions and spawn draws come from the JAX key schedule (one jitted call per
    epoch), so this mode plays the same game as jax_parallel."""

    epochs_per_call = 1

    def __init__(self, config: IQNRunConfig) -> None:
        self.config, self.epoch = config, 0
        self.agent_config, self.world_params = config.agent, config.world
        start = first_world(init_world_runs(world_keys(config.seed, 1), self.agent_config, config.world.n_agents))
        self.run_key = start.run_key
        self.agents = [iqn.unstack_agent(start.agents, i) for i in range(config.world.n_agents)]
        self.world = _python_world(config)
        self.compile_s = self._warm_up()

    def _warm_up(self) -> float:
        """Compile every jitted function on agent 0 (results discarded): seconds."""
        started = time.perf_counter()
        c, agent = self.agent_config, self.agents[0]
        positions, _, keys = _sequential_draws(self.run_key, np.int32(0), world_params=self.world_params)
        obs = np.zeros(c.obs_size, np.float32)
        # The port's learn, compiled ahead of time with the options the other JAX modes use.
        self._learn = compile_lowered(iqn.learn.lower(agent, keys.learn[0], config=c))
        jax.block_until_ready((
            iqn.act(agent, obs, keys.act[0, 0], config=c), iqn.remember(agent, obs, 0, 0.0, 0.0, config=c),
            _start_one(agent, np.int32(0), config=c), _end_one(agent, config=c), positions))
        return time.perf_counter() - started

    def run_epochs(self, k: int) -> EpochNumbers:
        _one_at_a_time(k)
        started = time.perf_counter()
        c, world, n = self.agent_config, self.world, self.world_params.n_agents
        positions, uniforms, keys = _sequential_draws(self.run_key, np.int32(self.epoch), world_params=self.world_params)
        positions, uniforms = jax.device_get((positions, uniforms))
        world.reset(positions)
        agents = [_start_one(agent, np.int32(self.epoch), config=c) for agent in self.agents]
        gems, rewards = 0, np.zeros(n)
        for t in range(self.world_params.max_turns):
            world.spawn_gems(uniforms[t])
            before = world.gems_on_map()
            observations = [world.observe(i) for i in range(n)]
            # Dispatch every agent's act before reading any action back (the reads wait for them).
            pending = [iqn.act(agents[i], observations[i], keys.act[t, i], config=c) for i in range(n)]
            actions = [int(action) for action in pending]
            step_rewards = [world.move(i, action) for i, action in enumerate(actions)]
            agents = [iqn.remember(agent, obs, action, reward, 0.0, config=c)
                      for agent, obs, action, reward in zip(agents, observations, actions, step_rewards)]
            rewards += step_rewards
            gems += before - world.gems_on_map()
        epsilon = float(agents[0].epsilon)
        learned = [self._learn(agent, keys.learn[i]) for i, agent in enumerate(agents)]
        self.agents = [_end_one(agent, config=c) for agent, _ in learned]
        losses = np.array(jax.device_get([loss for _, loss in learned]), np.float64)
        self.epoch += 1
        return _one_epoch(gems, rewards, losses, epsilon, time.perf_counter() - started)

    def params(self) -> Any:
        return iqn.stack_agents(self.agents).params


class JaxParallelRunner:
    """The agents stacked on a leading axis and the JAX world: per epoch one jitted start call, ONE
    jitted call per turn (world turn + vmapped acting + vmapped buffer writes), one jitted end call
    (vmapped learn + epsilon decay). The calls are compiled ahead of time and donate the agents."""

    epochs_per_call = 1

    def __init__(self, config: IQNRunConfig) -> None:
        self.config, self.epoch = config, 0
        c, w = config.agent, config.world
        start = first_world(init_world_runs(world_keys(config.seed, 1), c, w.n_agents))
        self.agents, self.run_key = own_buffers(start.agents), start.run_key
        started = time.perf_counter()
        epoch = np.int32(0)
        self._start = compile_lowered(
            _parallel_start.lower(self.agents, self.run_key, epoch, agent_config=c, world_params=w))
        _, world, keys, totals = jax.eval_shape(
            functools.partial(_parallel_start, agent_config=c, world_params=w), self.agents, self.run_key, epoch)
        self._turn = compile_lowered(_parallel_turn.lower(world, self.agents, keys, totals, agent_config=c, world_params=w))
        self._end = compile_lowered(_parallel_end.lower(self.agents, keys, agent_config=c))
        self.compile_s = time.perf_counter() - started

    def run_epochs(self, k: int) -> EpochNumbers:
        _one_at_a_time(k)
        started = time.perf_counter()
        agents, world, keys, totals = self._start(self.agents, self.run_key, np.int32(self.epoch))
        for _ in range(self.config.world.max_turns):
            world, agents, totals = self._turn(world, agents, keys, totals)
        self.agents, losses, epsilon = self._end(agents, keys)
        totals, losses, epsilon = jax.device_get((totals, losses, epsilon))
        self.epoch += 1
        return _one_epoch(int(totals.gems), totals.rewards, losses, float(epsilon[0]), time.perf_counter() - started)

    def params(self) -> Any:
        return self.agents.params


class JaxFusedRunner:
    """Whole epochs of ``num_worlds`` worlds in one compiled call (``fused_epochs``), the state donated."""

    def __init__(self, config: IQNRunConfig, keys: jax.Array | None = None) -> None:
        """keys: [num_worlds] world keys (default ``world_keys(seed, num_worlds)``); tests pass
        ``world_keys(seed, n)[w:w + 1]`` to replay world w of an n-world run on its own."""
        self.config = config
        self.epochs_per_call = config.epochs_per_call
        keys = world_keys(config.seed, config.num_worlds) if keys is None else keys
        if keys.shape != (config.num_worlds,):
            raise ValueError(f"keys must have shape (num_worlds,) = ({config.num_worlds},), got {keys.shape}")
        self.runs = own_buffers(init_world_runs(keys, config.agent, config.world.n_agents))
        self._compiled: dict[int, Any] = {}
        self.compile_s = 0.0
        self.compile(config.epochs_per_call)

    def compile(self, slots: int) -> Any:
        """The compiled call with ``slots`` epoch slots (any chunk of 1 .. slots epochs); compiled
        once per slot count, the seconds added to compile_s."""
        if slots not in self._compiled:
            started = time.perf_counter()
            self._compiled[slots] = compile_lowered(fused_epochs.lower(
                self.runs, np.int32(slots), agent_config=self.config.agent, world_params=self.config.world,
                n_epochs=slots))
            self.compile_s += time.perf_counter() - started
        return self._compiled[slots]

    def run_epochs(self, k: int) -> EpochNumbers:
        """k epochs in one call of the smallest compiled program with at least k slots (compiling
        one with epochs_per_call slots, outside the timing, if none has that many)."""
        fits = [slots for slots in self._compiled if slots >= k]
        compiled = self._compiled[min(fits)] if fits else self.compile(max(k, self.epochs_per_call))
        started = time.perf_counter()
        self.runs, stats = compiled(self.runs, np.int32(k))
        stats = jax.device_get(stats)  # waits for the call
        seconds = (time.perf_counter() - started) / k
        return EpochNumbers(np.asarray(stats.gems[:k], np.int64), np.asarray(stats.rewards[:k], np.float64),
                            np.asarray(stats.losses[:k], np.float64), np.asarray(stats.epsilon[:k, 0, 0], np.float64),
                            np.full(k, seconds))

    def params(self) -> Any:
        params = self.runs.agents.params
        return jax.tree_util.tree_map(lambda leaf: leaf[0], params) if self.config.num_worlds == 1 else params


RUNNERS = {"pytorch": PytorchRunner, "jax_sequential": JaxSequentialRunner, "jax_parallel": JaxParallelRunner,
           "jax_fused": JaxFusedRunner}


def make_runner(config: IQNRunConfig) -> Runner:
    """The runner of ``config.mode`` (built, and for the JAX modes compiled)."""
    return RUNNERS[config.mode](config)
