"""labcore.truncation: values at the cut steps of a rollout, in passes of one env batch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from labcore import devices, truncation


def value_of(obs):
    """An elementwise stand-in for a critic: the same value whatever batch a row is in."""
    return jnp.sum(obs * jnp.arange(1, obs.shape[-1] + 1), axis=-1)


def rollout(seed, steps=12, envs=4, rate=0.2):
    rng = np.random.default_rng(seed)
    final_obs = rng.normal(size=(steps, envs, 3)).astype(np.float32)
    cut = rng.random((steps, envs)) < rate
    return jnp.asarray(final_obs), jnp.asarray(cut)


@pytest.mark.parametrize("rate", [0.0, 0.05, 0.5, 1.0], ids=["no cut", "a few", "many passes", "every step"])
def test_values_at_cut_steps_and_zero_elsewhere(rate):
    final_obs, cut = rollout(0, rate=rate)
    values = jax.jit(truncation.final_values, static_argnums=(0, 3))(value_of, final_obs, cut, False)
    assert values.shape == cut.shape and values.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(values), np.where(np.asarray(cut), np.asarray(value_of(final_obs)), 0.0))


def test_each_pass_has_the_shape_of_one_env_batch_and_runs_only_while_cuts_are_left(monkeypatch):
    monkeypatch.setattr(devices, "launch_bound", lambda: False)  # the form every device but a GPU takes
    shapes, calls = [], []
    final_obs, cut = rollout(1, rate=0.5)  # about 6 cuts of each env's 12 steps: as many passes of 4 rows

    def recording(obs):
        shapes.append(obs.shape)
        jax.debug.callback(lambda: calls.append(1))
        return value_of(obs)

    jax.block_until_ready(truncation.final_values(recording, final_obs, cut))
    assert shapes == [(4, 3)]  # traced once, with [E, ...] rows
    assert len(calls) == int(np.max(np.sum(np.asarray(cut), axis=0))) > 1  # pass k: every env's k-th cut
    calls.clear()
    jax.block_until_ready(truncation.final_values(recording, final_obs, jnp.zeros_like(cut)))
    assert calls == []  # no cut, no pass


def test_one_pass_is_a_pass_over_every_step():
    final_obs, cut = rollout(2)
    shapes = []
    values = truncation.final_values(lambda obs: shapes.append(obs.shape) or value_of(obs), final_obs, cut, one_pass=True)
    assert shapes == [(48, 3)]
    np.testing.assert_array_equal(np.asarray(values), np.where(np.asarray(cut), np.asarray(value_of(final_obs)), 0.0))


def test_under_vmap_each_rollout_gets_its_own_cuts():
    rollouts = [rollout(seed, rate=rate) for seed, rate in ((3, 0.0), (4, 0.1), (5, 0.9))]
    final_obs, cut = (jnp.stack(parts) for parts in zip(*rollouts))
    together = jax.jit(jax.vmap(lambda o, c: truncation.final_values(value_of, o, c)))(final_obs, cut)
    for i, (o, c) in enumerate(rollouts):
        np.testing.assert_array_equal(np.asarray(together[i]), np.asarray(truncation.final_values(value_of, o, c)))


def test_shapes_that_disagree_are_refused():
    final_obs, cut = rollout(6)
    with pytest.raises(ValueError, match="disagree on"):
        truncation.final_values(value_of, final_obs[:-1], cut)


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu form", "gpu form"])
def test_the_default_passes_are_one_env_batch_on_a_cpu_and_one_pass_with_no_loop_on_a_gpu(monkeypatch, gpu):
    """A GPU reads a while_loop's test back to the host at every pass, so there the default is one
    pass over every step; the values at the cut steps are the same."""
    from labcore.tools.introspection import count_primitives

    monkeypatch.setattr(devices, "launch_bound", lambda: gpu)
    final_obs, cut = rollout(2, rate=0.3)
    program = jax.make_jaxpr(lambda obs, cut: truncation.final_values(value_of, obs, cut))(final_obs, cut)
    assert count_primitives(program, "while") == (0 if gpu else 1)
    values = truncation.final_values(value_of, final_obs, cut)
    np.testing.assert_allclose(np.asarray(values), np.where(np.asarray(cut), np.asarray(value_of(final_obs)), 0.0),
                               rtol=1e-6)
