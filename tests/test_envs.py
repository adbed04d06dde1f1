"""Host environments: id and action-space checks, the Atari preprocessing, the vectorised variant;
labcore's masked games; the layering (nothing below the agents imports them)."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from labcore import envs
from labcore.envs.atari import make_atari, make_atari_vector


def test_unknown_id_suggests_close_ones():
    with pytest.raises(ValueError, match="unknown environment id 'CartPol-v1'.*CartPole-v1"):
        envs.check_env_id("CartPol-v1")


def test_continuous_actions_are_refused():
    with pytest.raises(ValueError, match="'MountainCarContinuous-v0' has a Box action space"):
        envs.make_single_env("MountainCarContinuous-v0")


def test_atari_preprocessing_shapes_clipping_and_life_loss():
    env = make_atari("ALE/Breakout-v5", seed=0, repeat_action_probability=0.0)
    stack, info = env.reset(seed=0)
    assert stack.shape == (4, 84, 84) and stack.dtype == np.uint8 and isinstance(env.action_space, gym.spaces.Discrete)
    assert all(np.array_equal(stack[0], frame) for frame in stack)  # reset pads with the first frame
    lives, lost, rewards = info["lives"], 0, []
    for step in range(3000):
        stack, reward, terminated, truncated, info = env.step(1 if step % 50 == 0 else 0)  # serve, then wait
        rewards.append(reward)
        lost += info["life_lost"]
        if terminated or truncated:
            break
    env.close()
    # Every life was lost without the env resetting in between: one game, 5 life-loss steps.
    assert terminated and lost == lives == 5
    assert set(rewards) <= {-1.0, 0.0, 1.0}
    assert info["episode"]["l"] == step + 1


def test_unclipped_rewards_for_evaluation():
    env = envs.make_single_env("ALE/Breakout-v5", training=False, seed=0)
    assert not any(isinstance(wrapper, envs.atari.ClipReward) for wrapper in _wrappers(env))
    env.close()


def _wrappers(env):
    while isinstance(env, gym.Wrapper):
        yield env
        env = env.env


def test_vector_atari_auto_resets_in_the_same_step():
    vector = make_atari_vector("ALE/Breakout-v5", num_envs=2, seed=0, max_episode_steps=40)
    obs, _ = vector.reset(seed=[0, 1])
    assert obs.shape == (2, 4, 84, 84)
    for _ in range(45):
        obs, reward, terminated, truncated, info = vector.step(vector.action_space.sample())
        if (terminated | truncated).any():
            break
    done = np.flatnonzero(terminated | truncated)
    assert len(done) > 0
    for i in done:  # the returned obs starts a new game; the finished game's last one is kept
        assert info["final_obs"][i].shape == (4, 84, 84)
        assert all(np.array_equal(obs[i][0], frame) for frame in obs[i])
    vector.close()


def test_hypergrid_is_a_masked_game():
    assert "HyperGrid-v0" in envs.MASKED_ENVS
    env, params = envs.make_masked_env("HyperGrid-v0")
    assert env.num_actions == 3 and env.observation_space(params).shape == (16,)
    obs, state = env.reset(jax.random.key(0), params)
    step = jax.jit(env.step)
    finished = []
    for t in range(60):  # random legal play: every trajectory ends by exiting, with return R(x) > 0
        logits = jnp.where(env.action_mask(state, params), 0.0, -jnp.inf)
        action = jax.random.categorical(jax.random.key(1000 + t), logits)
        obs, state, _, terminated, truncated, info = step(jax.random.key(t), state, action, params)
        assert obs.shape == (16,) and not bool(truncated)
        if bool(info["returned_episode"]):
            finished.append(float(info["returned_episode_return"]))
    assert len(finished) > 5 and min(finished) >= params.r0


def test_unknown_masked_game_lists_labcore_games():
    with pytest.raises(ValueError, match="Vault-v0, HyperGrid-v0"):
        envs.make_masked_env("Vaul-v0")
