"""labcore's Flax NNX networks against the Flax Linen versions they replaced, and the functional adapter.

The Linen actor-critic below is the one PPO used before the move to NNX (reference material: it
lives in the tests, not in labcore). With the same weights the two networks compute the same
numbers, so a PPO run is the same run on either: checked over whole training updates.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from labcore.agents.ppo import core as ppo
from labcore.nets.actor_critic import ActorCritic, make_actor_critic, orthogonal
from labcore.nets.functional import Functional


class LinenActorCritic(nn.Module):
    """PPO's actor-critic as it was in Flax Linen (parameters under the same names)."""

    num_actions: int
    hidden_size: int = 256
    num_layers: int = 2
    activation: str = "tanh"
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, obs):
        act = jnp.tanh if self.activation == "tanh" else nn.relu
        zeros = nn.initializers.constant(0.0)

        def dense(features, gain, name):
            return nn.Dense(features, kernel_init=nn.initializers.orthogonal(gain), bias_init=zeros,
                            dtype=self.dtype, param_dtype=jnp.float32, name=name)

        def trunk(x, name):
            for layer in range(self.num_layers):
                x = act(dense(self.hidden_size, np.sqrt(2), f"{name}_{layer}")(x))
            return x

        x = obs.astype(self.dtype)
        logits = dense(self.num_actions, 0.01, "policy")(trunk(x, "actor"))
        value = dense(1, 1.0, "value")(trunk(x, "critic"))
        return logits.astype(jnp.float32), jnp.squeeze(value, axis=-1).astype(jnp.float32)


class LinenNetwork:
    """The Linen network behind PPO's network interface, starting from the NNX network's weights."""

    def __init__(self, nnx_network: Functional, linen: LinenActorCritic):
        self.nnx_network, self.linen = nnx_network, linen

    def init(self, key):
        return self.nnx_network.init(key)  # the transferred weights: the same leaves, the same names

    def apply(self, params, obs):
        return self.linen.apply({"params": params}, obs)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_the_nnx_actor_critic_computes_what_the_linen_one_did(activation, dtype):
    network = make_actor_critic(7, 5, hidden_size=32, num_layers=3, activation=activation, dtype=dtype)
    linen = LinenActorCritic(5, 32, 3, activation, dtype)
    obs = jax.random.normal(jax.random.key(1), (16, 7))
    linen_params = linen.init(jax.random.key(0), obs)["params"]
    params = network.init(jax.random.key(0))
    assert jax.tree.map(jnp.shape, params) == jax.tree.map(jnp.shape, linen_params)
    assert jax.tree.map(lambda a: a.dtype, params) == jax.tree.map(lambda a: a.dtype, linen_params)  # float32, whatever dtype
    logits, value = jax.jit(network.apply)(params, obs)
    linen_logits, linen_value = jax.jit(linen.apply)({"params": params}, obs)
    assert logits.dtype == value.dtype == jnp.float32 and logits.shape == (16, 5) and value.shape == (16,)
    np.testing.assert_array_equal(logits, linen_logits)
    np.testing.assert_array_equal(value, linen_value)
    # the same initial distribution: orthogonal (rows of a square hidden kernel are orthonormal with
    # gain sqrt(2)), zero biases, a near-uniform first policy
    hidden = np.asarray(params["actor_1"]["kernel"])
    np.testing.assert_allclose(hidden.T @ hidden, 2.0 * np.eye(32), atol=1e-4)
    assert not np.any(np.asarray(params["critic_0"]["bias"]))
    assert float(jnp.max(jnp.abs(logits))) < 0.5


def test_ppo_trains_to_the_same_parameters_on_nnx_and_on_linen(monkeypatch):
    config = ppo.PPOConfig(env_id="Vault-v0", num_envs=8, num_steps=16, total_steps=8 * 16 * 5, hidden_size=32)
    agent = ppo.make_ppo(config)
    run = jax.jit(agent.run, static_argnums=1)
    nnx_runner, nnx_metrics = run(agent.init(jax.random.key(0)), 5)

    def linen_actor_critic(obs_size, num_actions, hidden_size, num_layers, activation, dtype):
        nnx_network = make_actor_critic(obs_size, num_actions, hidden_size, num_layers, activation, dtype)
        return LinenNetwork(nnx_network, LinenActorCritic(num_actions, hidden_size, num_layers, activation, dtype))

    monkeypatch.setattr(ppo, "make_actor_critic", linen_actor_critic)
    linen_agent = ppo.make_ppo(config)
    assert isinstance(linen_agent.network, LinenNetwork)
    linen_run = jax.jit(linen_agent.run, static_argnums=1)
    linen_runner, linen_metrics = linen_run(linen_agent.init(jax.random.key(0)), 5)
    # 5 updates x 4 minibatches x 4 epochs of Adam steps on the same data
    largest = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(
        jax.tree.leaves(nnx_runner.params), jax.tree.leaves(linen_runner.params), strict=True))
    print(f"largest parameter difference after 5 updates: {largest:.1e}")
    assert largest <= 1e-6, largest
    np.testing.assert_allclose(nnx_metrics["policy_loss"], linen_metrics["policy_loss"], rtol=1e-5, atol=1e-7)
    assert float(jnp.max(jnp.abs(nnx_runner.params["policy"]["kernel"] - agent.init(jax.random.key(0)).params[
        "policy"]["kernel"]))) > 1e-4  # the updates moved the weights: the comparison is not of two starts


def test_functional_init_is_the_modules_own_and_vmaps_over_keys():
    network = make_actor_critic(4, 2, hidden_size=8, num_layers=1)
    params = network.init(jax.random.key(3))
    eager = ActorCritic(4, 2, hidden_size=8, num_layers=1, rngs=nnx.Rngs(params=jax.random.key(3)))
    jax.tree.map(np.testing.assert_array_equal, params, nnx.to_pure_dict(nnx.state(eager, nnx.Param)))
    jax.tree.map(np.testing.assert_array_equal, jax.jit(network.init)(jax.random.key(3)), params)
    stacked = jax.vmap(network.init)(jax.random.split(jax.random.key(0), 3))
    assert stacked["actor_0"]["kernel"].shape == (3, 4, 8)
    obs = jnp.ones((3, 5, 4))
    logits, _ = jax.vmap(network.apply)(stacked, obs)
    first = network.apply(jax.tree.map(lambda leaf: leaf[0], stacked), obs[0])[0]
    np.testing.assert_allclose(logits[0], first, rtol=1e-6)
    assert not np.allclose(logits[0], logits[1])  # three seeds, three networks
    # the module a parameter dict gives is a real NNX module, holding exactly those arrays
    module = network.bind(params)
    assert isinstance(module, ActorCritic)
    np.testing.assert_array_equal(module.policy.kernel[...], params["policy"]["kernel"])


def test_many_agents_draw_nnxs_orthogonal_matrices_one_at_a_time():
    """Under vmap every agent gets the matrix nnx's orthogonal initializer gives its key alone, and the
    vmapped PPO program holds no batched LAPACK call (jaxlib 0.10.2's batched CPU QR could wait forever on
    a 2-core machine when the actor's and the critic's ran at once: see labcore.nets.actor_critic.orthogonal)."""
    keys = jax.random.split(jax.random.key(7), 5)
    for gain, shape in ((np.sqrt(2), (4, 64)), (0.01, (64, 2)), (1.0, (64, 1)), (np.sqrt(2), (6, 6))):
        drawn = jax.jit(jax.vmap(lambda key: orthogonal(gain)(key, shape, jnp.float32)))(keys)
        nnx_own = nnx.initializers.orthogonal(gain)
        for key, matrix in zip(keys, drawn):
            np.testing.assert_array_equal(matrix, jax.jit(lambda key: nnx_own(key, shape, jnp.float32))(key))
    shared = jax.vmap(lambda _, key: orthogonal(1.0)(key, (3, 3), jnp.float32), in_axes=(0, None))(
        jnp.arange(2), keys[0])  # one key for both: the same matrix twice
    np.testing.assert_array_equal(shared[0], shared[1])

    program = jax.jit(jax.vmap(ppo.make_ppo(ppo.PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=8,
                                                           total_steps=64)).train)).lower(keys).as_text()
    lapack_calls = [line for line in program.splitlines() if "custom_call @lapack_" in line]
    assert any("geqrf" in line for line in lapack_calls)  # the initializer's QR is in the program
    assert all('num_batch_dims = "0"' in line for line in lapack_calls), [
        line.split("(")[0] for line in lapack_calls if 'num_batch_dims = "0"' not in line]


def test_functional_refuses_a_module_with_state_beyond_its_parameters():
    class KeepsItsRngs(nnx.Module):
        def __init__(self, rngs):
            self.linear = nnx.Linear(2, 2, rngs=rngs)
            self.rngs = rngs  # an RNG stream is state that changes on every draw

    with pytest.raises(ValueError, match="only state is nnx.Param"):
        Functional(KeepsItsRngs)
    with pytest.raises(ValueError, match=r"activation must be one of \['relu', 'tanh'\], got 'gelu'"):
        make_actor_critic(4, 2, activation="gelu")
