"""PQN (Gallici et al., ICLR 2025): Q-learning without a replay buffer or a target network.

DQN needs its replay buffer to decorrelate consecutive transitions and its target network to
stop the bootstrapped target chasing the parameters it trains. PQN replaces both with things a
vectorised JAX loop has anyway: many envs stepped side by side (a batch of one step of 128 envs
is already far less correlated than 128 consecutive steps of one env), and a LayerNorm in the
Q-network, which keeps the TD update stable with the online network bootstrapping itself. With
no buffer to fill, every transition is used right away, in a few epochs of minibatches, like PPO:

    config = PQNConfig.cartpole()                        # or PQNConfig.minatar("Breakout-MinAtar")
    train = make_train(config)                           # checks everything before tracing
    runner, metrics = jax.jit(train)(jax.random.key(0))
    runners, metrics = jax.jit(jax.vmap(train))(jax.random.split(key, 3))   # 3 seeds at once

``PQNConfig`` is defined in ``labcore.agents.pqn.config`` (which imports no JAX) and re-exported here.

Each update: roll out ``num_steps`` steps of ``num_envs`` envs, epsilon-greedy on the current
Q-network; compute the Q(lambda) targets of the rollout once, with the same network
(``labcore.losses.q_lambda_targets``); then ``update_epochs`` passes of ``num_minibatches``
minibatch steps of the squared TD error against those fixed targets. Metrics are one number per
update, and ``callback`` sees them every ``log_every`` updates while the compiled program runs, in
bursts of as many logged rows as fit in ``labcore.logged_scan.METRICS_BURST_STEPS`` env steps (at least one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from labcore import envs, evaluation, logged_scan, loop, losses, truncation
from labcore.agents.pqn.config import OPTIMIZERS, PQNConfig, is_atari_id  # noqa: F401 (core.PQNConfig, as before)
from labcore.envs.batched import GymnaxBatch
from labcore.nets.q_networks import epsilon_greedy, make_q_network


class Transition(NamedTuple):
    """One step of every env: leaves [num_envs, ...] (a rollout stacks them to [num_steps, num_envs, ...])."""

    obs: jax.Array  # [E, *obs_shape]
    action: jax.Array  # [E] int32
    reward: jax.Array  # [E] float32, scaled by reward_scale
    terminated: jax.Array  # [E] bool: a terminal state (no bootstrap)
    truncated: jax.Array  # [E] bool: a time limit (bootstraps from final_obs)
    max_q: jax.Array  # [E] max_a Q(obs, a) under the acting parameters
    final_obs: jax.Array | None  # [E, *obs_shape] the true next observation (the episode's last one at an end); None unless bootstrap_truncation
    episode_done: jax.Array  # [E] bool
    episode_return: jax.Array  # [E] the finished episode's unscaled return (where episode_done)


@struct.dataclass
class RunnerState:
    """Everything training carries from one update to the next: checkpoint this to resume."""

    params: Any
    opt_state: Any
    env_state: Any  # [num_envs] env states
    obs: jax.Array  # [num_envs, *obs_shape]
    episode_return: jax.Array  # [num_envs] running return of each env's current episode
    key: jax.Array
    update_step: jax.Array  # [] int32 updates done


class PQN(NamedTuple):
    """The pure functions of one configured PQN (see the module docstring)."""

    config: PQNConfig
    network: hk.Transformed
    env: Any  # the gymnax env, or the Atari games (labcore.envs.ale_jax.AtariJaxEnv)
    env_params: Any  # the gymnax env's params (None for Atari)
    init: Callable[[jax.Array], RunnerState]
    run: Callable[[RunnerState, int], tuple[RunnerState, dict[str, jax.Array]]]
    train: Callable[[jax.Array], tuple[RunnerState, dict[str, jax.Array]]]
    evaluate: Callable[[Any, jax.Array], Any]  # (params, key) -> [eval_episodes] returns (Atari: played on the host, not jittable)
    collect: Callable[[RunnerState, jax.Array], tuple[RunnerState, Transition]]  # (runner, epsilon) -> rollout [T, E]
    targets: Callable[[Any, Transition, jax.Array], jax.Array]  # (params, rollout, obs after it) -> [T, E]
    learn: Callable[..., Any] = None  # (params, opt_state, (obs, actions, targets) [N, ...], key) -> (params, opt_state, stats)
    batch: Any = None  # the num_envs envs stepped together (labcore.envs.batched)


METRIC_NAMES = (
    "episode_return", "episodes", "epsilon", "loss", "q_mean", "grad_norm", "learning_rate", "timesteps",
)  # fmt: skip


def epsilon_at(timesteps: jax.Array, config: PQNConfig) -> jax.Array:
    """Linear from epsilon_start to epsilon_end over exploration_fraction * total_steps env steps."""
    duration = max(1.0, config.exploration_fraction * config.total_steps)
    fraction = jnp.clip(jnp.asarray(timesteps, jnp.float32) / duration, 0.0, 1.0)
    return config.epsilon_start + fraction * (config.epsilon_end - config.epsilon_start)


def make_pqn(
    config: PQNConfig,
    env: Any = None,
    env_params: Any = None,
    callback: Callable[[dict[str, np.ndarray]], None] | None = None,
    log_every: int = 1,
) -> PQN:
    """Configure PQN for ``env`` (default: ``config.env_id``: a gymnax env, ``envs.make_jax_env``, or
    for an ALE id ALE's vector env, ``labcore.envs.ale_jax.AtariJaxEnv``).

    callback: called on the host with the update's metrics (numpy scalars) every ``log_every``
    updates, in order, while training runs, the rows in bursts (``labcore.logged_scan.scan_updates``);
    under ``jax.vmap`` once per seed. Nothing is traced here.
    """
    if log_every < 1:
        raise ValueError(f"log_every must be >= 1, got {log_every}")
    atari = env is None and is_atari_id(config.env_id)
    if atari:
        from labcore.envs import ale_jax

        try:
            batch = ale_jax.AtariJaxEnv(atari_settings(config), stepping=config.env_stepping)
        except ValueError as err:
            raise ValueError(f"PQNConfig.env_id: {err}") from None
        env, env_params = batch, None
    else:
        env, env_params = envs.env_and_params(env, env_params, config.env_id, envs.make_jax_env, "PQNConfig.env_id")
        batch = GymnaxBatch(env, env_params, config.num_envs)
    num_actions, obs_shape = batch.num_actions, batch.obs_shape
    if config.network == "minatar_cnn" and len(obs_shape) != 3:
        raise ValueError(f"PQNConfig.network 'minatar_cnn' needs [H, W, C] observations; {config.env_id} gives {obs_shape}")
    network = make_q_network(config.network, num_actions, config.hidden_sizes, layer_norm=config.layer_norm)
    steps_per_update = config.num_minibatches * config.update_epochs

    def learning_rate(count: jax.Array) -> jax.Array:
        # optax counts minibatch steps; the rate falls linearly per update
        return config.learning_rate * (1.0 - (count // steps_per_update) / config.num_updates)

    schedule = learning_rate if config.anneal_lr else config.learning_rate
    base = optax.adam(schedule) if config.optimizer == "adam" else optax.radam(schedule)
    optimizer = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), base)
    max_q_of = lambda params, obs: jnp.max(network.apply(params, None, obs), axis=-1)  # noqa: E731

    def init(key: jax.Array) -> RunnerState:
        params_key, reset_key, key = jax.random.split(key, 3)
        obs, env_state = batch.reset(reset_key)
        params = network.init(params_key, obs[:1])
        return RunnerState(
            params=params,
            opt_state=optimizer.init(params),
            env_state=env_state,
            obs=obs,
            episode_return=jnp.zeros(config.num_envs, jnp.float32),
            key=key,
            update_step=jnp.int32(0),
        )

    def env_step(runner: RunnerState, epsilon: jax.Array) -> tuple[RunnerState, Transition]:
        key, act_key, step_key = jax.random.split(runner.key, 3)
        q = network.apply(runner.params, None, runner.obs)
        action = epsilon_greedy(q, epsilon, act_key)
        obs, env_state, step = batch.step(step_key, runner.env_state, action)
        reward = jnp.clip(step.reward, -1.0, 1.0) if config.clip_rewards else step.reward
        episode_return = runner.episode_return + step.score
        transition = Transition(
            obs=runner.obs,
            action=action,
            reward=reward * config.reward_scale,
            terminated=step.terminated,
            truncated=step.truncated,
            max_q=jnp.max(q, axis=-1),
            final_obs=step.final_obs if config.bootstrap_truncation else None,
            episode_done=step.episode_done,
            episode_return=episode_return,
        )
        runner = runner.replace(
            env_state=env_state, obs=obs, episode_return=jnp.where(step.episode_done, 0.0, episode_return), key=key
        )
        return runner, transition

    def collect(runner: RunnerState, epsilon: jax.Array) -> tuple[RunnerState, Transition]:
        """One rollout of num_steps steps of every env, epsilon-greedy; leaves [T, E, ...]."""
        return jax.lax.scan(lambda r, _: env_step(r, epsilon), runner, None, length=config.num_steps)

    def targets_of(params: Any, rollout: Transition, last_obs: jax.Array) -> jax.Array:
        """[T, E] Q(lambda) targets of a rollout, from the parameters that collected it."""
        # max Q of each step's next observation: the next step's acting Q, the observation after
        # the rollout for the last step, and (bootstrap_truncation) the episode's own last
        # observation where a time limit cut it, computed for the cut steps alone, in passes of one
        # env batch after the rollout (labcore.truncation; a terminal step never bootstraps).
        next_max_q = jnp.concatenate([rollout.max_q[1:], max_q_of(params, last_obs)[None]])
        if config.bootstrap_truncation:
            cut = rollout.truncated & ~rollout.terminated
            final_max_q = truncation.final_values(lambda obs: max_q_of(params, obs), rollout.final_obs, cut)
            next_max_q = jnp.where(cut, final_max_q, next_max_q)
            terminated = rollout.terminated
        else:  # a time limit is treated as a terminal state (PureJaxRL and purejaxql do this)
            terminated = rollout.terminated | rollout.truncated
        return losses.q_lambda_targets(
            rollout.reward, terminated, rollout.truncated, next_max_q, config.gamma, config.q_lambda
        )

    def loss_fn(params: Any, obs: jax.Array, action: jax.Array, target: jax.Array):
        q = network.apply(params, None, obs)  # [M, A]
        q_taken = jnp.take_along_axis(q, action[:, None], axis=-1)[:, 0]
        loss = 0.5 * jnp.mean((q_taken - jax.lax.stop_gradient(target)) ** 2)
        return loss, jnp.mean(q_taken)

    def minibatch_step(carry, minibatch):
        params, opt_state = carry
        (loss, q_mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, *minibatch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), (loss, q_mean, optax.tree.norm(grads))

    def epoch(carry, epoch_key):
        params, opt_state, data = carry
        order = jax.random.permutation(epoch_key, config.batch_size)
        minibatches = jax.tree_util.tree_map(
            lambda leaf: leaf[order].reshape(config.num_minibatches, config.minibatch_size, *leaf.shape[1:]), data
        )
        (params, opt_state), stats = jax.lax.scan(minibatch_step, (params, opt_state), minibatches)
        return (params, opt_state, data), stats

    def learn(params: Any, opt_state: Any, data: tuple[jax.Array, ...], key: jax.Array):
        """``update_epochs`` epochs of ``num_minibatches`` minibatch steps on data = (obs [N, ...],
        actions [N], targets [N]), N = batch_size, each epoch in an order drawn from its own key.
        Returns (params, opt_state, (loss, q_mean, grad_norm)), the stats [epochs, minibatches]."""
        (params, opt_state, _), stats = jax.lax.scan(
            epoch, (params, opt_state, data), jax.random.split(key, config.update_epochs))
        return params, opt_state, stats

    def update(runner: RunnerState, _) -> tuple[RunnerState, dict[str, jax.Array]]:
        timesteps = runner.update_step * config.batch_size
        epsilon = epsilon_at(timesteps, config)
        runner, rollout = collect(runner, epsilon)
        targets = targets_of(runner.params, rollout, runner.obs)
        flat = lambda leaf: leaf.reshape(config.batch_size, *leaf.shape[2:])  # noqa: E731
        data = (flat(rollout.obs), flat(rollout.action), flat(targets))
        key, epochs_key = jax.random.split(runner.key)
        params, opt_state, (loss, q_mean, grad_norm) = learn(runner.params, runner.opt_state, data, epochs_key)
        runner = runner.replace(params=params, opt_state=opt_state, key=key, update_step=runner.update_step + 1)
        episodes = jnp.sum(rollout.episode_done)
        return_sum = jnp.sum(jnp.where(rollout.episode_done, rollout.episode_return, 0.0))
        metrics = {
            "episode_return": jnp.where(episodes > 0, return_sum / jnp.maximum(episodes, 1), jnp.nan),
            "episodes": episodes,
            "epsilon": epsilon,
            "loss": jnp.mean(loss),
            "q_mean": jnp.mean(q_mean),
            "grad_norm": jnp.mean(grad_norm),
            "learning_rate": learning_rate(runner.update_step * steps_per_update - 1)
            if config.anneal_lr
            else jnp.float32(config.learning_rate),
            "timesteps": runner.update_step * config.batch_size,
        }
        return runner, metrics

    def run(runner: RunnerState, num_updates: int) -> tuple[RunnerState, dict[str, jax.Array]]:
        """``num_updates`` more updates (static). Returns metrics with leaves [num_updates]."""
        return logged_scan.scan_updates(lambda r: update(r, None), runner, num_updates, updates_done=lambda r: r.update_step,
                                        callback=callback, log_every=log_every,
                                        rows_per_burst=logged_scan.burst_rows(config.batch_size, log_every))

    def train(key: jax.Array) -> tuple[RunnerState, dict[str, jax.Array]]:
        return run(init(key), config.num_updates)

    def evaluate(params: Any, key: jax.Array) -> jax.Array:
        """[eval_episodes] returns at epsilon ``config.eval_epsilon`` (0: greedy)."""

        def choose(choose_key, obs, _mask):
            return epsilon_greedy(network.apply(params, None, obs[None]), config.eval_epsilon, choose_key)[0]

        return evaluation.play_episodes(env, env_params, choose, key, config.eval_episodes)

    if atari:
        evaluate = _atari_evaluation(config, network)

    return PQN(config, network, env, env_params, init, run, train, evaluate, collect, targets_of, learn, batch)


def atari_settings(config: PQNConfig, num_envs: int | None = None):
    """The ALE vector env settings of an Atari config (``labcore.envs.ale_vector.AtariSettings``)."""
    from labcore.envs import ale_vector

    return ale_vector.AtariSettings(
        config.env_id, num_envs=config.num_envs if num_envs is None else num_envs,
        repeat_action_probability=config.repeat_action_probability, life_loss_terminal=config.life_loss_terminal,
        max_episode_steps=config.max_episode_steps)


def _atari_evaluation(config: PQNConfig, network: hk.Transformed) -> Callable[[Any, jax.Array], np.ndarray]:
    """Atari's ``evaluate(params, key) -> [eval_episodes]``: whole games (every life, points
    unclipped) played on the host at ``config.eval_epsilon`` (``labcore.envs.ale_vector.play_games``),
    on up to 16 envs, under the config's sticky actions."""
    from labcore.envs import ale_vector

    act = jax.jit(lambda params, obs, key: epsilon_greedy(network.apply(params, None, obs), config.eval_epsilon, key))
    settings = atari_settings(config, num_envs=min(config.eval_episodes, 16))

    def evaluate(params: Any, key: jax.Array) -> np.ndarray:
        seed = int(jax.random.randint(key, (), 0, 2**30))
        policy = lambda obs, step: np.asarray(act(params, obs, jax.random.fold_in(key, step)))  # noqa: E731
        return np.asarray(ale_vector.play_games(settings, policy, config.eval_episodes, seed=seed), np.float32)

    return evaluate


def make_train(
    config: PQNConfig,
    *,
    env: Any = None,
    env_params: Any = None,
    callback: Callable[[dict[str, np.ndarray]], None] | None = None,
    log_every: int = 1,
) -> Callable[[jax.Array], tuple[RunnerState, dict[str, jax.Array]]]:
    """A pure ``train(key) -> (runner, metrics)``: wrap it in jax.jit (and jax.vmap for seeds).
    The options of ``make_pqn`` (keyword-only here), which also gives init/run/evaluate."""
    return make_pqn(config, env, env_params, callback, log_every).train
