"""Action-masked PPO in the PureJaxRL style: all of training is one jitted, vmappable function.

    config = PPOConfig.cartpole()                      # or PPOConfig(): the masked Vault game
    train = make_train(config)                         # checks everything before tracing
    runner, metrics = jax.jit(train)(jax.random.key(0))
    runners, metrics = jax.jit(jax.vmap(train))(jax.random.split(key, 8))   # 8 seeds at once

``PPOConfig`` is defined in ``labcore.agents.ppo.config`` (which imports no JAX) and re-exported here.

``make_ppo`` returns the pieces: ``ppo.init(key)`` and ``ppo.run(runner, num_updates)`` split ``train`` so that a run can be
checkpointed (the runner state is a pytree) and resumed exactly.

Each update: roll out ``num_steps`` steps of ``num_envs`` envs (acting under the env's action
mask, which is stored with each transition; one network pass a step), add the value of the final
observation to the reward of every step a time limit cut (one batched critic pass over the cut steps
after the rollout, ``labcore.truncation``), compute GAE, then ``update_epochs`` passes of
``num_minibatches`` minibatch steps of the clipped PPO loss, where log-probabilities and entropy
are recomputed under the stored masks. Metrics are one number per update (means over the
rollout), never per step, and ``callback`` sees them every ``log_every`` updates while the
compiled program runs: the logged rows wait on the device and reach the host in bursts, each host
call carrying as many rows as fit in ``labcore.logged_scan.METRICS_BURST_STEPS`` env steps (at least one;
every call is a transfer and a Python call made from inside the program), and all of them by the
time ``run`` returns.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from labcore import devices, envs, evaluation, logged_scan, loop, losses, packing, truncation
from labcore.agents.ppo.config import ACTIVATIONS, COMPUTE_DTYPES, PPOConfig  # noqa: F401 (core.PPOConfig, as before)
from labcore.nets.actor_critic import make_actor_critic
from labcore.nets.functional import Functional


class Transition(NamedTuple):
    """One step of every env: leaves [num_envs, ...] (a rollout stacks them to [num_steps, num_envs, ...])."""

    obs: jax.Array  # [E, D]
    action: jax.Array  # [E] int32
    reward: jax.Array  # [E] float32 (after ``collect``: plus gamma * V(final obs) where a time limit cut, when bootstrapping)
    done: jax.Array  # [E] bool: the episode ended at this step
    truncated: jax.Array | None  # [E] bool: a time limit cut the episode here (it did not terminate); None unless bootstrapping
    final_obs: jax.Array | None  # [E, D] the observation the step ended on (before any reset); None unless bootstrapping
    value: jax.Array  # [E]
    log_prob: jax.Array  # [E] under the mask the action was chosen with
    mask: jax.Array  # [E, A] bool, the legal actions when acting
    episode_done: jax.Array  # [E] bool, for episode statistics
    episode_return: jax.Array  # [E]
    episode_length: jax.Array  # [E]


@struct.dataclass
class RunnerState:
    """Everything training carries from one update to the next: checkpoint this to resume."""

    params: Any
    opt_state: Any
    env_state: Any  # [num_envs] env states
    obs: jax.Array  # [num_envs, D]
    mask: jax.Array  # [num_envs, A] the legal actions in env_state
    key: jax.Array
    update_step: jax.Array  # [] int32 updates done


class PPO(NamedTuple):
    """The pure functions of one configured PPO (see the module docstring)."""

    config: PPOConfig
    network: Functional  # the actor-critic: network.init(key) -> params, network.apply(params, obs)
    env: Any
    env_params: Any
    init: Callable[[jax.Array], RunnerState]
    run: Callable[[RunnerState, int], tuple[RunnerState, dict[str, jax.Array]]]
    train: Callable[[jax.Array], tuple[RunnerState, dict[str, jax.Array]]]
    policy: Callable[[Any, jax.Array, jax.Array], jax.Array]  # (params, obs [B, D], mask [B, A]) -> greedy [B]
    collect: Callable[[RunnerState], tuple[RunnerState, Transition]]  # one rollout, leaves [T, E, ...], rewards bootstrapped


def masked_policy(logits: jax.Array, mask: jax.Array | None) -> distrax.Categorical:
    """The categorical policy over the legal actions: logits, mask [..., A] (mask None: all legal).

    Illegal logits become -1e9, so they are never sampled, their probability is exactly 0 and
    they add nothing to ``entropy()``, whose ceiling is log(number of legal actions).
    """
    return distrax.Categorical(logits=logits if mask is None else losses.masked_logits(logits, mask))


def sample_action(key: jax.Array, logits: jax.Array, mask: jax.Array | None) -> tuple[jax.Array, jax.Array]:
    """An action of ``masked_policy(logits, mask)`` and its log-probability: logits, mask [B, A] -> [B], [B].

    Bit for bit the action (for the same key) and log-probability of that distribution's ``sample``
    and ``log_prob``, in fewer operations: distrax also checks every probability (a sample of
    non-finite logits becomes -1) and masks the logits into a copy that XLA computes apart, several
    extra operations in every rollout step. A row with no legal action (labcore's masked envs
    always have one) is the exception: it draws an illegal action with a meaningless log-probability.
    """
    if mask is None:
        log_probs = jax.nn.log_softmax(logits)
        choice_logits = log_probs
    elif devices.launch_bound():
        # On a GPU, XLA compiles a log-softmax of elementwise-computed logits into one kernel (a
        # Triton softmax); the form below, tuned for the CPU, compiles there to two reductions: one
        # more kernel at every rollout step (counted in the program compiled for an H200,
        # benchmarks/gpu_kernels.py). Masked entries are about -1e9, never drawn.
        log_probs = jax.nn.log_softmax(losses.masked_logits(logits, mask))
        choice_logits = log_probs
    else:
        # jax.nn.log_softmax(losses.masked_logits(logits, mask)), operation for operation, with the
        # mask applied by each operation that reads the logits rather than once to a masked copy:
        # XLA fuses every select into its reader (a copy read three times it computes apart), so
        # masking adds no operation to a rollout step. The max is taken over -inf (then floored at
        # MASKED_LOGIT, which gives the same max) so that XLA does not merge its select with the
        # sum's. log_probs is exact for the legal actions, the only ones drawn.
        top = jnp.max(jnp.where(mask, logits, -jnp.inf), axis=-1, keepdims=True)
        top = jax.lax.stop_gradient(jnp.maximum(top, losses.MASKED_LOGIT))
        normaliser = jnp.log(jnp.sum(jnp.exp(losses.masked_logits(logits, mask) - top), axis=-1, keepdims=True))
        log_probs = (logits - top) - normaliser
        choice_logits = jnp.where(mask, log_probs, losses.MASKED_LOGIT)
    action = jax.random.categorical(key, choice_logits)
    return action, jnp.take_along_axis(log_probs, action[:, None], axis=-1)[:, 0]


METRIC_NAMES = (
    "episode_return", "episode_length", "episodes", "entropy", "max_entropy", "policy_loss", "value_loss",
    "approx_kl", "clip_fraction", "invalid_action_rate", "learning_rate", "timesteps",
)  # fmt: skip


def make_ppo(
    config: PPOConfig,
    env: Any = None,
    env_params: Any = None,
    callback: Callable[[dict[str, np.ndarray]], None] | None = None,
    log_every: int = 1,
) -> PPO:
    """Configure PPO for ``env`` (default ``envs.make_masked_env(config.env_id)``).

    callback: called on the host with the update's metrics (0-d numpy arrays; under vmap, once per
    seed) every ``log_every`` updates, in order, while training runs; the rows arrive in bursts (see
    the module docstring). Nothing is traced here.
    """
    env, env_params = envs.env_and_params(env, env_params, config.env_id, envs.make_masked_env, "PPOConfig.env_id")
    if log_every < 1:
        raise ValueError(f"log_every must be >= 1, got {log_every}")
    num_actions = env.num_actions
    obs_size = int(np.prod(env.observation_space(env_params).shape))
    network = make_actor_critic(obs_size, num_actions, config.hidden_size, config.num_layers, config.activation,
                                dtype=jnp.dtype(config.compute_dtype))
    batch_size = config.num_envs * config.num_steps
    rows_per_burst = logged_scan.burst_rows(batch_size, log_every)  # logged rows per host call

    def schedule(count: jax.Array) -> jax.Array:
        # optax counts minibatch steps; the rate falls linearly per update, as in PureJaxRL
        steps_per_update = config.num_minibatches * config.update_epochs
        return config.learning_rate * (1.0 - (count // steps_per_update) / config.num_updates)

    optimizer = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.adam(schedule if config.anneal_lr else config.learning_rate, eps=1e-5),
    )
    reset_envs = jax.vmap(env.reset, in_axes=(0, None))
    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    masks_of = jax.vmap(env.action_mask, in_axes=(0, None))

    def pi(logits: jax.Array, mask: jax.Array) -> distrax.Categorical:
        # unmasked: the agent sees every action as legal and the env penalises illegal ones
        return masked_policy(logits, mask if config.mask_actions else None)

    def init(key: jax.Array) -> RunnerState:
        params_key, reset_key, key = jax.random.split(key, 3)
        params = network.init(params_key)
        obs, env_state = reset_envs(jax.random.split(reset_key, config.num_envs), env_params)
        return RunnerState(
            params=params,
            opt_state=optimizer.init(params),
            env_state=env_state,
            obs=obs,
            mask=masks_of(env_state, env_params),
            key=key,
            update_step=jnp.int32(0),
        )

    def env_step(runner: RunnerState, _) -> tuple[RunnerState, Transition]:
        key, action_key, step_key = jax.random.split(runner.key, 3)
        logits, value = network.apply(runner.params, runner.obs)
        action, log_prob = sample_action(action_key, logits, runner.mask if config.mask_actions else None)
        obs, env_state, reward, terminated, truncated, info = step_envs(
            jax.random.split(step_key, config.num_envs), runner.env_state, action, env_params
        )
        transition = Transition(
            obs=runner.obs,
            action=action,
            reward=reward.astype(jnp.float32),
            done=terminated | truncated,
            # what bootstrapping needs after the rollout (collect): no second network pass per step
            truncated=truncated & ~terminated if config.bootstrap_truncation else None,
            final_obs=info["final_observation"] if config.bootstrap_truncation else None,
            value=value,
            log_prob=log_prob,
            mask=runner.mask,
            episode_done=info["returned_episode"],
            episode_return=info["returned_episode_return"],
            episode_length=info["returned_episode_length"].astype(jnp.float32),
        )
        runner = runner.replace(env_state=env_state, obs=obs, mask=masks_of(env_state, env_params), key=key)
        return runner, transition

    def collect(runner: RunnerState) -> tuple[RunnerState, Transition]:
        """One rollout of num_steps steps of every env (leaves [T, E, ...]); with bootstrap_truncation,
        each step a time limit cut gets gamma * V(final obs) on its reward."""
        # on a GPU, one write per step for all of a step's dozen small outputs (labcore.packing)
        runner, rollout = packing.scan(env_step, runner, config.num_steps)
        if config.bootstrap_truncation:
            # A time limit is not a real end: credit the value of where the episode was cut off,
            # computed for the few cut steps after the rollout, with the parameters that acted
            # (XLA drops the actor's half of the pass: its logits are not used).
            critic = lambda obs: network.apply(runner.params, obs)[1]  # noqa: E731
            final_value = truncation.final_values(critic, rollout.final_obs, rollout.truncated)
            rollout = rollout._replace(reward=rollout.reward + config.gamma * final_value * rollout.truncated)
        return runner, rollout

    def loss_fn(params, batch: Transition, advantages: jax.Array, returns: jax.Array):
        logits, values = network.apply(params, batch.obs)
        policy = pi(logits, batch.mask)  # the mask stored with the transition, not a fresh one
        log_ratio = policy.log_prob(batch.action) - batch.log_prob
        if config.normalize_advantages:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        policy_loss = losses.ppo_clipped_objective(log_ratio, advantages, config.clip_eps)
        value_loss = losses.ppo_value_loss(values, batch.value, returns, config.clip_eps)
        entropy = jnp.mean(policy.entropy())
        total = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
        ratio = jnp.exp(log_ratio)
        stats = {
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "entropy": entropy,
            "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
            "clip_fraction": jnp.mean(jnp.abs(ratio - 1.0) > config.clip_eps),
        }
        return total, stats

    def minibatch_step(carry, minibatch):
        params, opt_state = carry
        batch, advantages, returns = minibatch
        grads, stats = jax.grad(loss_fn, has_aux=True)(params, batch, advantages, returns)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), stats

    def epoch(carry, epoch_key):
        params, opt_state, rollout, advantages, returns = carry
        order = jax.random.permutation(epoch_key, batch_size)

        def to_minibatches(leaf):
            flat = leaf.reshape(batch_size, *leaf.shape[2:])[order]
            return flat.reshape(config.num_minibatches, config.minibatch_size, *leaf.shape[2:])

        minibatches = jax.tree_util.tree_map(to_minibatches, (rollout, advantages, returns))
        (params, opt_state), stats = jax.lax.scan(minibatch_step, (params, opt_state), minibatches)
        return (params, opt_state, rollout, advantages, returns), stats

    def update(runner: RunnerState, _) -> tuple[RunnerState, dict[str, jax.Array]]:
        runner, rollout = collect(runner)
        _, last_value = network.apply(runner.params, runner.obs)
        advantages, returns = losses.gae_advantages(
            rollout.reward, rollout.value, rollout.done, last_value, config.gamma, config.gae_lambda
        )
        key, epochs_key = jax.random.split(runner.key)
        # the epochs shuffle what the loss reads: not the final observations, already used
        learned = rollout._replace(truncated=None, final_obs=None)
        (params, opt_state, *_), stats = jax.lax.scan(
            epoch,
            (runner.params, runner.opt_state, learned, advantages, returns),
            jax.random.split(epochs_key, config.update_epochs),
        )
        runner = runner.replace(params=params, opt_state=opt_state, key=key, update_step=runner.update_step + 1)
        episodes = jnp.sum(rollout.episode_done)
        per_episode = lambda x: jnp.sum(jnp.where(rollout.episode_done, x, 0.0)) / jnp.maximum(episodes, 1)  # noqa: E731
        metrics = {
            "episode_return": jnp.where(episodes > 0, per_episode(rollout.episode_return), jnp.nan),
            "episode_length": jnp.where(episodes > 0, per_episode(rollout.episode_length), jnp.nan),
            "episodes": episodes,
            **{name: jnp.mean(value) for name, value in stats.items()},
            # the entropy of a uniform choice among the legal actions: the ceiling for 'entropy'
            "max_entropy": jnp.mean(jnp.log(jnp.sum(rollout.mask if config.mask_actions else jnp.ones_like(rollout.mask), -1))),
            # the chosen action was illegal (never, when masking); from the stored masks, not per step
            "invalid_action_rate": jnp.mean(~jnp.take_along_axis(rollout.mask, rollout.action[..., None], -1)),
            "learning_rate": schedule(runner.update_step * config.num_minibatches * config.update_epochs - 1)
            if config.anneal_lr
            else jnp.float32(config.learning_rate),
            "timesteps": runner.update_step * batch_size,
        }
        return runner, metrics

    def run(runner: RunnerState, num_updates: int) -> tuple[RunnerState, dict[str, jax.Array]]:
        """``num_updates`` more updates (static). Returns metrics with leaves [num_updates]."""
        return logged_scan.scan_updates(lambda r: update(r, None), runner, num_updates, updates_done=lambda r: r.update_step,
                                        callback=callback, log_every=log_every, rows_per_burst=rows_per_burst)

    def train(key: jax.Array) -> tuple[RunnerState, dict[str, jax.Array]]:
        return run(init(key), config.num_updates)

    def policy(params: Any, obs: jax.Array, mask: jax.Array) -> jax.Array:
        logits, _ = network.apply(params, obs)
        return pi(logits, mask).mode()

    return PPO(config, network, env, env_params, init, run, train, policy, collect)


def policy_returns(agent: PPO, params: Any, key: jax.Array, num_episodes: int = 32, greedy: bool = True) -> jax.Array:
    """[num_episodes] returns of the trained policy: greedy (argmax over legal actions) or
    sampled (the stochastic policy PPO trained, as in its training curves)."""

    def choose(choose_key, obs, mask):
        if greedy:
            return agent.policy(params, obs[None], mask[None])[0]
        logits, _ = agent.network.apply(params, obs[None])
        return masked_policy(logits, mask[None] if agent.config.mask_actions else None).sample(seed=choose_key)[0]

    return evaluation.play_episodes(agent.env, agent.env_params, choose, key, num_episodes)


def make_train(
    config: PPOConfig,
    *,
    env: Any = None,
    env_params: Any = None,
    callback: Callable[[dict[str, np.ndarray]], None] | None = None,
    log_every: int = 1,
) -> Callable[[jax.Array], tuple[RunnerState, dict[str, jax.Array]]]:
    """PureJaxRL's entry point: a pure ``train(key) -> (runner, metrics)``; wrap it in jax.jit
    (and jax.vmap for seeds). The options of ``make_ppo`` (keyword-only here), which also gives init/run/policy."""
    return make_ppo(config, env, env_params, callback, log_every).train


class EntropyWatch:
    """A metrics callback that warns once if the policy's entropy collapses early.

    Collapse: entropy below ``fraction`` of its ceiling (log of the number of legal actions)
    during the first ``early`` fraction of training, a policy that stopped exploring.
    Chain another callback through ``then``.
    """

    def __init__(self, config: PPOConfig, fraction: float = 0.05, early: float = 0.25, then: Callable | None = None):
        self.config, self.fraction, self.early, self.then = config, fraction, early, then
        self.warned = False

    def __call__(self, metrics: dict[str, np.ndarray]) -> None:
        early = np.all(np.asarray(metrics["timesteps"]) <= self.early * self.config.total_steps)
        ratio = np.asarray(metrics["entropy"]) / np.maximum(np.asarray(metrics["max_entropy"]), 1e-8)
        if early and not self.warned and np.any(ratio < self.fraction):
            self.warned = True
            warnings.warn(
                f"policy entropy collapsed early: {float(np.min(ratio)):.1%} of its maximum at timestep "
                f"{int(np.max(metrics['timesteps'])):,}; consider a larger ent_coef (now {self.config.ent_coef})",
                RuntimeWarning,
                stacklevel=2,
            )
        if self.then is not None:
            self.then(metrics)
