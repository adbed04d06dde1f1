"""Notebook 06 (iqn_port): the IQN port (NoisyLinear, the quantile Huber loss, the update, the frame buffer's ring).

The core exercise is the port's whole update, ``iqn_train_step`` (checked against labcore's
``train_step``; its pieces are in ``iqn_train_step_checks``). The NoisyLinear forward, the layer that
makes the port's exploration, is checked against the PyTorch reference layer in both modes. Below the exercises' inputs and references come
the worked solutions (shown by ``labcore.course.exercises.solution(name)``) and the classic mistakes that
``check`` names when an answer reproduces one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from labcore.course.exercises.checking import Exercise


def _noisy_linear_inputs(rng: np.random.Generator) -> tuple:
    batch, n_in, n_out = int(rng.integers(1, 9)), int(rng.integers(1, 12)), int(rng.integers(1, 12))
    bound = np.sqrt(3.0 / n_in)

    def draw(*shape: int) -> np.ndarray:
        return rng.normal(size=shape).astype(np.float32)

    return (
        draw(batch, n_in),
        rng.uniform(-bound, bound, size=(n_in, n_out)).astype(np.float32),
        rng.uniform(-bound, bound, size=(n_out,)).astype(np.float32),
        # sigmas far from their 0.017 start, so that a wrong noise term shows at float32 precision
        rng.uniform(0.01, 0.5, size=(n_in, n_out)).astype(np.float32),
        rng.uniform(0.01, 0.5, size=(n_out,)).astype(np.float32),
        draw(n_in, n_out),
        draw(n_out),
    )


def _noisy_linear_torch(x, kernel, bias, sigma_kernel, sigma_bias, eps_kernel, eps_bias, deterministic: bool):
    """The PyTorch reference layer (labcore.torch_ref.irainbow_network.NoisyLinear) with these weights and this draw."""
    import torch

    from labcore.torch_ref import irainbow_network as irainbow

    n_in, n_out = kernel.shape
    layer = irainbow.NoisyLinear(n_in, n_out)
    with torch.no_grad():  # PyTorch stores weights as [out, in]: the Flax-layout kernels are transposed
        layer.weight.copy_(torch.from_numpy(np.ascontiguousarray(kernel.T)))
        layer.bias.copy_(torch.from_numpy(bias))
        layer.sigma_weight.copy_(torch.from_numpy(np.ascontiguousarray(sigma_kernel.T)))
        layer.sigma_bias.copy_(torch.from_numpy(sigma_bias))
        layer.set_noise(np.ascontiguousarray(eps_kernel.T), eps_bias)
        layer.train(not deterministic)
        return layer(torch.from_numpy(x)).numpy()


def _noisy_linear_reference(*arrays):
    """(training-mode output, eval-mode output), each [B, out]."""
    return _noisy_linear_torch(*arrays, False), _noisy_linear_torch(*arrays, True)


def _run_in_both_modes(noisy_linear):
    """Call the learner's noisy_linear(..., deterministic) jitted, with deterministic False then True
    (static: a Python bool chooses the branch at trace time)."""
    import jax

    jitted = jax.jit(noisy_linear, static_argnums=7)

    def run(*arrays):
        return jitted(*arrays, False), jitted(*arrays, True)

    return run


def _quantile_huber_inputs(rng: np.random.Generator) -> tuple:
    batch, n = int(rng.integers(1, 17)), int(rng.integers(2, 13))
    # |td| both below and above kappa = 1, so that both branches of the Huber loss are used
    td = (rng.normal(size=(batch, n, n)) * rng.choice([0.5, 2.0, 5.0])).astype(np.float32)
    taus = rng.random((batch, n, 1)).astype(np.float32)
    valid = (rng.random((batch, 1)) > 0.25).astype(np.float32)
    valid[0, 0] = 1.0  # never an all-zero loss
    return td, taus, valid


def _quantile_huber_reference(td, taus, valid):
    """The loss exactly as labcore.agents.iqn.core.loss_and_draws computes it from td (tests/test_exercises.py
    checks it against the PyTorch reference's quantile_huber_terms(...).mean())."""
    import jax.numpy as jnp

    from labcore import losses

    huber = losses.huber_loss(td, 1.0) * valid[:, :, None]
    weight = jnp.abs(taus - (td < 0).astype(jnp.float32))
    return jnp.mean(weight * huber)


def _current_state_inputs(rng: np.random.Generator) -> tuple:
    n_frames = int(rng.integers(2, 7))
    capacity = int(rng.integers(n_frames + 2, 40))
    obs = int(rng.integers(1, 6))
    # half the draws put idx where the n_frames - 1 rows before it wrap around the end of the ring
    idx = rng.integers(0, n_frames - 1) if rng.random() < 0.5 else rng.integers(0, capacity)
    return rng.normal(size=(capacity, obs)).astype(np.float32), np.int32(idx), n_frames


def _current_state_reference(states, idx, n_frames):
    """labcore's buffer_current_state on a FrameBuffer holding ``states`` with write position ``idx``."""
    import jax.numpy as jnp

    from labcore.agents.iqn import core as iqn
    from labcore.agents.iqn import frame_buffer as fb

    capacity, obs = states.shape
    config = iqn.IQNConfig(obs_size=obs, n_frames=n_frames, buffer_size=capacity, batch_size=1)
    buf = fb.buffer_init(config).replace(states=jnp.asarray(states), idx=jnp.int32(idx), size=jnp.int32(capacity))
    return fb.buffer_current_state(buf, config)


def _run_with_static_frames(current_state):
    """jax.jit the learner's current_state with n_frames static and idx traced (as inside a jitted epoch)."""
    import jax

    return jax.jit(current_state, static_argnums=2)


# ----------------------------------------------------------------------------------------------
# Worked solutions, written as a learner would write them.


def noisy_linear(x, kernel, bias, sigma_kernel, sigma_bias, eps_kernel, eps_bias, deterministic):
    if deterministic:  # a Python bool: jit picks this branch while tracing, one program per mode
        return x @ kernel + bias
    noisy_kernel = kernel + sigma_kernel * eps_kernel  # [in, out]: every weight has its own draw
    noisy_bias = bias + sigma_bias * eps_bias  # [out]: the bias is noisy too
    return x @ noisy_kernel + noisy_bias


def quantile_huber_loss(td, taus, valid):
    huber = jnp.where(jnp.abs(td) <= 1.0, 0.5 * jnp.square(td), jnp.abs(td) - 0.5)  # kappa = 1
    below = jnp.where(td < 0, 1.0, 0.0)  # 1{td < 0}: the target lies below the predicted quantile
    weighted = jnp.abs(taus - below) * huber  # taus [B, N, 1] broadcast over the targets j
    return jnp.mean(weighted * valid[:, :, None])  # the mean over all B * N * N terms, as the original


def current_state(states, idx, n_frames):
    capacity = states.shape[0]
    offsets = jnp.arange(1 - n_frames, 0)  # -(n_frames - 1) .. -1: oldest first
    return states[jnp.mod(idx + offsets, capacity)]  # the modulo wraps; no Python branch on idx


# ----------------------------------------------------------------------------------------------
# Classic mistakes. Each runs and returns the right shape, so that check compares values.


def _noisy_linear_means_in_both_modes(x, kernel, bias, sigma_kernel, sigma_bias, eps_kernel, eps_bias, deterministic):
    return x @ kernel + bias


def _noisy_linear_noisy_in_eval_mode(x, kernel, bias, sigma_kernel, sigma_bias, eps_kernel, eps_bias, deterministic):
    return x @ (kernel + sigma_kernel * eps_kernel) + bias + sigma_bias * eps_bias


def _noisy_linear_without_bias_noise(x, kernel, bias, sigma_kernel, sigma_bias, eps_kernel, eps_bias, deterministic):
    if deterministic:
        return x @ kernel + bias
    return x @ (kernel + sigma_kernel * eps_kernel) + bias


def _noisy_linear_noise_on_the_output(x, kernel, bias, sigma_kernel, sigma_bias, eps_kernel, eps_bias, deterministic):
    if deterministic:
        return x @ kernel + bias
    return x @ kernel + bias + jnp.sum(sigma_kernel * eps_kernel, axis=0) + sigma_bias * eps_bias


def _quantile_huber_summed_over_targets(td, taus, valid):
    huber = jnp.where(jnp.abs(td) <= 1.0, 0.5 * td**2, jnp.abs(td) - 0.5)
    terms = jnp.abs(taus - (td < 0)) * huber * valid[:, :, None]
    return jnp.mean(jnp.sum(terms, axis=2))


def _quantile_huber_without_the_quantile_weight(td, taus, valid):
    huber = jnp.where(jnp.abs(td) <= 1.0, 0.5 * td**2, jnp.abs(td) - 0.5)
    return jnp.mean(huber * valid[:, :, None])


def _quantile_huber_indicator_flipped(td, taus, valid):
    huber = jnp.where(jnp.abs(td) <= 1.0, 0.5 * td**2, jnp.abs(td) - 0.5)
    return jnp.mean(jnp.abs(taus - (td > 0)) * huber * valid[:, :, None])


def _current_state_newest_first(states, idx, n_frames):
    return states[(idx - 1 - jnp.arange(n_frames - 1)) % states.shape[0]]


def _current_state_including_the_next_row(states, idx, n_frames):
    return states[(idx - (n_frames - 2) + jnp.arange(n_frames - 1)) % states.shape[0]]


def _current_state_without_the_wrap(states, idx, n_frames):
    start = jnp.maximum(idx - (n_frames - 1), 0)  # stops at row 0 instead of wrapping to the end
    return jax.lax.dynamic_slice_in_dim(states, start, n_frames - 1)


def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""
    from labcore.course.lessons.nb06_iqn_port import iqn_train_step_checks

    return [
        Exercise(
            name="noisy_linear",
            description="The independent-Gaussian NoisyLinear forward as a pure function: x [B, in], kernel [in, out], "
            "bias [out], sigma_kernel [in, out], sigma_bias [out], eps_kernel [in, out], eps_bias [out], "
            "deterministic (a Python bool) -> [B, out].\n"
            "Training mode (deterministic=False) perturbs the WEIGHTS and the BIAS, each entry by its own draw "
            "scaled by its own sigma, and then multiplies; eval mode (deterministic=True) uses the means only. "
            "Not factorised noise, and not noise added to the output. The checker runs your function jitted in "
            "both modes and compares (training, eval) with the PyTorch reference layer: output[0] is training "
            "mode, output[1] eval mode.",
            reference=_noisy_linear_reference,
            make_inputs=_noisy_linear_inputs,
            run_with=_run_in_both_modes,
            # Each output sums at most 11 float32 products of order 1 (x and eps ~ N(0, 1), means below
            # 1.8, sigmas below 0.5), added in different orders by PyTorch and XLA: a few 1e-7 apart.
            # Every mistake leaves out or adds sigma * eps terms with sigma >= 0.01, which moves most
            # of the B * out outputs by 1e-3 or more: far outside 1e-5 + 1e-5 |y|.
            rtol=1e-5,
            atol=1e-5,
            solution=noisy_linear,
            mistakes=(
                ("no noise in training mode: the mean weights in both modes", _noisy_linear_means_in_both_modes),
                ("noise in eval mode too: `deterministic` is ignored", _noisy_linear_noisy_in_eval_mode),
                ("no noise on the bias: only the kernel is perturbed", _noisy_linear_without_bias_noise),
                ("the weight noise added to the output (summed over inputs, not multiplied by x)",
                 _noisy_linear_noise_on_the_output),
            ),
        ),
        Exercise(
            name="quantile_huber_loss",
            description="The iRainbow loss from the TD errors: td [B, N, N] (td[b, i, j] = target_j - expected_i), "
            "taus [B, N, 1] (the fractions of the expected quantiles), valid [B, 1] -> [].\n"
            "huber = 0.5 td^2 where |td| <= 1, else |td| - 0.5 (kappa = 1); weight = |tau_i - 1{td < 0}| (the "
            "taus broadcast over the target axis j); loss = MEAN over all B * N * N elements of "
            "weight * huber * valid[:, :, None], padding rows included: the original averages, it does not sum "
            "over the target quantiles.",
            reference=_quantile_huber_reference,
            make_inputs=_quantile_huber_inputs,
            jit=True,
            # One mean of at most 16 * 12 * 12 float32 terms: summation order moves it by ~1e-7 relative.
            rtol=1e-5,
            atol=1e-6,
            solution=quantile_huber_loss,
            mistakes=(
                ("summed over the target quantiles j instead of averaged over them",
                 _quantile_huber_summed_over_targets),
                ("no quantile weight |tau - 1{td < 0}|: a plain Huber loss",
                 _quantile_huber_without_the_quantile_weight),
                ("the indicator flipped: 1{td > 0} instead of 1{td < 0}", _quantile_huber_indicator_flipped),
            ),
        ),
        Exercise(
            name="iqn_train_step",
            description="The port's whole update: (params, target_params, opt_state, batch, key, config) -> (params, "
            "target_params, opt_state, loss), the loss measured before the step.\n"
            "network = iqn.make_network(config); network.apply(params, x [B, F], taus [B, N, 1], noise_key) -> "
            "quantiles [B, N, A]. draws = iqn.loss_randomness(key, B, config) gives the taus (taus_next, taus_target, "
            "taus_expected) and noise keys (key_next, key_target, key_expected) of the three forwards. a* = argmax of "
            "the LOCAL network's mean over the quantiles on next_states (double DQN); the targets are rewards + "
            "gamma ** n_step * Z_target(s', a*) * (1 - dones), [B, N]; the predictions are the local network's "
            "quantiles on states at the stored actions, [B, N]; td[b, i, j] = target_j - predicted_i; the loss is "
            "the MEAN of |tau_i - 1{td < 0}| * huber(td) * valid over all B x N x N (kappa 1, tau_i from "
            "taus_expected). Then iqn.make_optimizer(config) (gradient clipping, then Adam) and the soft update "
            "target <- rate * params + (1 - rate) * target with rate = config.target_update_rate. The checker jits "
            "your function (config static) and compares all four outputs with labcore.agents.iqn.core.train_step.",
            reference=iqn_train_step_checks.reference,
            make_inputs=iqn_train_step_checks.inputs,
            run_with=iqn_train_step_checks.run_jitted,
            trials=2,  # each trial compiles two whole updates (yours and labcore's): seconds on a CPU
            rtol=1e-5,
            atol=1e-6,
            solution=iqn_train_step_checks.solution,
            mistakes=iqn_train_step_checks.MISTAKES,
            core=True,
        ),
        Exercise(
            name="current_state",
            description="The frames an agent stacks before its new observation: states [capacity, obs], idx [] int "
            "(the next row the buffer writes), n_frames -> [n_frames - 1, obs], the n_frames - 1 rows before idx, "
            "OLDEST first, wrapping around the end of the ring.\n"
            "The checker jits your function with idx traced (n_frames static), so a Python "
            "`if idx < n_frames - 1:` branch with two slices cannot work: build one vector of row numbers and "
            "let a modulo do the wrapping.",
            reference=_current_state_reference,
            make_inputs=_current_state_inputs,
            run_with=_run_with_static_frames,
            rtol=0.0,  # rows are copied, not computed: exact
            atol=0.0,
            solution=current_state,
            mistakes=(
                ("newest first: the rows come out in reverse order", _current_state_newest_first),
                ("off by one: the rows end at idx, the row the buffer writes next",
                 _current_state_including_the_next_row),
                ("no wrap: the rows stop at row 0 instead of continuing from the end of the ring",
                 _current_state_without_the_wrap),
            ),
        ),
    ]
