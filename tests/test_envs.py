"""Host environments: id and action-space checks, Atari through ALE's vector env (clipping, lost lives,
seeded games, a pickled copy that replays them);
labcore's masked games; the layering (nothing below the agents imports them)."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from labcore import envs


def test_unknown_id_suggests_close_ones():
    with pytest.raises(ValueError, match="unknown environment id 'CartPol-v1'.*CartPole-v1"):
        envs.check_env_id("CartPol-v1")


def test_continuous_actions_are_refused():
    with pytest.raises(ValueError, match="'MountainCarContinuous-v0' has a Box action space"):
        envs.make_single_env("MountainCarContinuous-v0")


def test_atari_through_ale_vector_env_clips_for_training_and_counts_whole_games():
    """Breakout through make_vector_env (ALE's vector env): [E, 4, 84, 84] uint8 stacks padded with
    zeros after a reset, training rewards clipped, each lost life reported while the game goes on,
    and one game's score counting all five lives."""
    vector = envs.make_vector_env("ALE/Breakout-v5", 1, seed=0, repeat_action_probability=0.0)
    stack, info = vector.reset(seed=0)
    assert stack.shape == (1, 4, 84, 84) and stack.dtype == np.uint8 and int(vector.single_action_space.n) == 4
    assert not stack[0, :3].any() and stack[0, 3].any()  # a new game's stack: three zero frames, then the screen
    lives, lost, rewards = int(info["lives"][0]), 0, []
    for step in range(3000):
        stack, reward, terminated, truncated, info = vector.step(np.array([1 if step % 50 == 0 else 0]))  # serve, wait
        rewards.append(float(reward[0]))
        lost += int(info["life_lost"][0])
        if terminated[0] or truncated[0]:
            break
    vector.close()
    assert terminated[0] and lost == lives - 1 == 4  # the last life is the game's end, not a lost life
    assert set(rewards) <= {-1.0, 0.0, 1.0}
    assert info["final_info"]["episode"]["l"][0] == step + 1 and info["final_obs"][0].shape == (4, 84, 84)


def test_atari_evaluation_scores_are_unclipped_and_every_game_is_seeded():
    def play(seed):
        vector = envs.make_vector_env("ALE/Breakout-v5", 2, seed=seed, training=False, max_episode_steps=300)
        rng, scores = np.random.default_rng(0), []
        while len(scores) < 4:
            _, reward, terminated, truncated, info = vector.step(rng.integers(0, 4, 2))
            assert reward.dtype == np.float32
            scores += [float(info["final_info"]["episode"]["r"][i]) for i in np.flatnonzero(terminated | truncated)]
        vector.close()
        return scores

    assert play(3) == play(3)


def test_a_pickled_atari_vector_env_replays_its_games():
    import pickle

    vector = envs.make_vector_env("ALE/Breakout-v5", 2, seed=1, max_episode_steps=80)
    rng = np.random.default_rng(0)
    for _ in range(100):
        vector.step(rng.integers(0, 4, 2))
    copy = pickle.loads(pickle.dumps(vector))
    for _ in range(60):
        actions = rng.integers(0, 4, 2)
        for a, b in zip(vector.step(actions)[:4], copy.step(actions)[:4]):
            np.testing.assert_array_equal(a, b)
    vector.close()
    copy.close()


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
