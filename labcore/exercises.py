"""Checkers for the notebooks' exercises.

A notebook cell asks the reader to write a function, then calls::

    labcore.exercises.check("stable_softmax", stable_softmax)

which runs the reader's function and labcore's reference on several fresh
random inputs and prints a pass, or the first mismatch (which input, which
output element, the two values). It returns True or False and never raises
for a wrong or unfinished answer, so a notebook with an unsolved exercise
still runs to the end (under nbval too). Exercises marked ``jit=True`` must
also work under ``jax.jit``: a solution that only works eagerly fails.

``python -m labcore exercises`` lists every exercise.
"""

from __future__ import annotations

import dataclasses
import textwrap
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

InputMaker = Callable[[np.random.Generator], tuple]


@dataclasses.dataclass(frozen=True)
class Exercise:
    """One exercise: a reference function and a way to draw random inputs for it."""

    name: str
    description: str  # first line: the task; the rest: hints shown on failure
    reference: Callable[..., Any]
    make_inputs: InputMaker  # rng -> positional arguments for both functions
    trials: int = 5
    rtol: float = 1e-5
    atol: float = 1e-6
    jit: bool = False  # the learner's function must also run under jax.jit
    # How the learner's function is run, e.g. under jax.pmap; the default calls it as it is.
    run_with: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None


_REGISTRY: dict[str, Exercise] = {}


def register(exercise: Exercise) -> Exercise:
    """Add an exercise to the catalogue (names are unique)."""
    if exercise.name in _REGISTRY:
        raise ValueError(f"exercise {exercise.name!r} is already registered")
    if exercise.trials < 1:
        raise ValueError(f"exercise {exercise.name!r}: trials must be >= 1, got {exercise.trials}")
    _REGISTRY[exercise.name] = exercise
    return exercise


def names() -> list[str]:
    """Every registered exercise name, sorted."""
    return sorted(_REGISTRY)


def get(name: str) -> Exercise:
    """The exercise called ``name``; a ValueError listing the known names otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown exercise {name!r}; known exercises: {', '.join(names())}") from None


# ----------------------------------------------------------------------------------------------
# Comparing a learner's output with the reference's.


def _describe_value(value: Any) -> str:
    import jax

    if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
        return "a PRNG key"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"array{tuple(value.shape)} {value.dtype}"
    import jax.tree_util as jtu

    leaves = jtu.tree_leaves(value)
    if isinstance(value, dict | list | tuple) or (leaves and leaves[0] is not value):  # containers, dataclasses
        return f"{type(value).__name__} pytree with {len(leaves)} arrays"
    return repr(value)


def _describe_inputs(args: tuple) -> str:
    return ", ".join(_describe_value(a) for a in args)


def first_mismatch(got: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-6) -> str | None:
    """None if ``got`` matches ``expected`` (same pytree structure, shapes, values within
    tolerance), else a sentence describing the first difference."""
    import jax.tree_util as jtu

    expected_paths, expected_def = jtu.tree_flatten_with_path(expected)
    got_leaves, got_def = jtu.tree_flatten(got)
    if got_def != expected_def:
        return f"the output's structure is {got_def}, but the reference returns {expected_def}"
    for (path, want), have in zip(expected_paths, got_leaves, strict=True):
        where = "output" + jtu.keystr(path)
        want, have = np.asarray(want), np.asarray(have)
        if have.shape != want.shape:
            return f"{where} has shape {have.shape}, but the reference's has shape {want.shape}"
        if have.dtype.kind != want.dtype.kind and not (have.dtype.kind in "fc" and want.dtype.kind in "fc"):
            return f"{where} has dtype {have.dtype}, but the reference's is {want.dtype}"
        close = np.isclose(have, want, rtol=rtol, atol=atol, equal_nan=False)
        if not np.all(close):
            index = tuple(int(i) for i in np.argwhere(~close)[0])
            at = f"{where}[{', '.join(map(str, index))}]" if index else where
            n_bad = int(np.size(close) - np.count_nonzero(close))
            return f"{at} = {have[index]!r}, but the reference gives {want[index]!r} ({n_bad} of {close.size} values differ)"
    return None


def _explain_exception(err: BaseException) -> str:
    if isinstance(err, NotImplementedError):
        return "it raised NotImplementedError: the exercise is not written yet"
    last = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
    where = f" (line {last.lineno}: {last.line})" if last and last.line else ""
    message = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"it raised {type(err).__name__}: {message}{where}"


def check(
    name: str,
    learner_fn: Callable[..., Any],
    *,
    trials: int | None = None,
    seed: int | None = None,
    verbose: bool = True,
) -> bool:
    """Run ``learner_fn`` and the reference of exercise ``name`` on fresh random inputs.

    Prints a pass, or the first failure with the inputs it failed on, and
    returns whether every trial matched. A wrong answer, or one that raises,
    is reported and returns False; only an unknown exercise name raises.
    ``seed`` fixes the inputs (the failure message always says which seed).
    """
    import jax

    exercise = get(name)
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0])
    rng = np.random.default_rng(seed)
    n_trials = exercise.trials if trials is None else trials

    def report(ok: bool, message: str) -> bool:
        if verbose:
            print(message)
        return ok

    for trial in range(n_trials):
        args = exercise.make_inputs(rng)
        expected = exercise.reference(*args)
        prepared = learner_fn if exercise.run_with is None else exercise.run_with(learner_fn)
        runs = [("", prepared)]
        if exercise.jit:
            runs.append((" under jax.jit", jax.jit(prepared)))
        for how, fn in runs:
            try:
                got = jax.block_until_ready(fn(*args))
            except Exception as err:  # noqa: BLE001 - the learner's code may raise anything
                problem = _explain_exception(err)
            else:
                problem = first_mismatch(got, expected, exercise.rtol, exercise.atol)
            if problem is not None:
                hint = "\n".join(exercise.description.splitlines()[1:]).strip()
                return report(
                    False,
                    f"FAIL  {name}: on input {trial + 1} of {n_trials}{how} (seed {seed}), {problem}.\n"
                    f"      inputs: {_describe_inputs(args)}"
                    + (f"\n      hint: {textwrap.fill(hint, 88, subsequent_indent=' ' * 12)}" if hint else ""),
                )
    checked = " and under jax.jit" if exercise.jit else ""
    return report(True, f"PASS  {name}: matches the reference on {n_trials} random inputs{checked}.")


# ----------------------------------------------------------------------------------------------
# The catalogue. Input makers draw shapes as well as values, so that a solution
# hard-wired to one shape fails.


def _jnp(x: np.ndarray):
    import jax.numpy as jnp

    return jnp.asarray(x, dtype=jnp.float32)


def _softmax_inputs(rng: np.random.Generator) -> tuple:
    rows, cols = rng.integers(1, 8), rng.integers(2, 12)
    # Logits in the hundreds: exp overflows float32 (max ~88.7) unless shifted first.
    scale = rng.choice([1.0, 50.0, 300.0])
    return (_jnp(rng.normal(size=(rows, cols)) * scale + rng.uniform(-500, 500)),)


def _diagonal_inputs(rng: np.random.Generator) -> tuple:
    n = rng.integers(1, 9)
    return _jnp(rng.normal(size=(n, n))), _jnp(rng.normal(size=n))


def _dropout_inputs(rng: np.random.Generator) -> tuple:
    import jax

    shape = tuple(rng.integers(1, 9, size=rng.integers(1, 4)))
    return jax.random.key(int(rng.integers(2**31))), _jnp(rng.normal(size=shape)), float(rng.choice([0.1, 0.5, 0.8]))


def _regression_inputs(rng: np.random.Generator) -> tuple:
    batch, dim = rng.integers(1, 33), rng.integers(1, 9)
    params = {"w": _jnp(rng.normal(size=dim)), "b": _jnp(rng.normal())}
    return params, _jnp(rng.normal(size=(batch, dim))), _jnp(rng.normal(size=batch))


def _pairwise_inputs(rng: np.random.Generator) -> tuple:
    n, m, dim = rng.integers(1, 9), rng.integers(1, 9), rng.integers(1, 6)
    return _jnp(rng.normal(size=(n, dim))), _jnp(rng.normal(size=(m, dim)))


def _pytree_inputs(rng: np.random.Generator) -> tuple:
    def leaf():
        return _jnp(rng.normal(size=tuple(rng.integers(1, 5, size=rng.integers(0, 3)))))

    tree = {
        "encoder": [leaf() for _ in range(rng.integers(1, 4))],
        "head": {"w": leaf(), "b": leaf()},
        "scale": leaf(),
    }
    return (tree,)


def _register_primitives() -> None:
    from labcore import primitives

    register(
        Exercise(
            name="stable_softmax",
            description="Softmax over the last axis that does not overflow for logits in the hundreds.\n"
            "exp(1000.) is inf in float32; subtract each row's max (keepdims=True) before exp.",
            reference=primitives.stable_softmax,
            make_inputs=_softmax_inputs,
            jit=True,
        )
    )
    register(
        Exercise(
            name="set_diagonal",
            description="Return a copy of a square matrix with its diagonal replaced by a vector.\n"
            "JAX arrays are immutable: use matrix.at[rows, cols].set(values) with index arrays.",
            reference=primitives.set_diagonal,
            make_inputs=_diagonal_inputs,
            jit=True,
        )
    )
    register(
        Exercise(
            name="dropout",
            description="Inverted dropout: zero entries with probability `rate`, scale the rest by 1/(1-rate).\n"
            "Draw the keep-mask with jax.random.bernoulli(key, 1 - rate, x.shape); the same key must give "
            "the same mask as the reference.",
            reference=primitives.dropout,
            make_inputs=_dropout_inputs,
        )
    )
    register(
        Exercise(
            name="linear_regression_grad",
            description="Gradient of the mean squared error of x @ w + b with respect to params {'w', 'b'}.\n"
            "Write the loss as a function of params first, then return jax.grad(loss)(params, x, y): "
            "a dict with the same keys and shapes as params.",
            reference=primitives.linear_regression_grad,
            make_inputs=_regression_inputs,
            jit=True,
        )
    )
    register(
        Exercise(
            name="pairwise_squared_distances",
            description="Squared distances between every row of a [N, D] and every row of b [M, D] -> [N, M].\n"
            "Write the distance of one pair of vectors, then vmap it twice: in_axes=(None, 0) inside, "
            "in_axes=(0, None) outside.",
            reference=primitives.pairwise_squared_distances,
            make_inputs=_pairwise_inputs,
            jit=True,
        )
    )
    register(
        Exercise(
            name="global_norm",
            description="The L2 norm of all the leaves of a pytree taken together (a scalar).\n"
            "jax.tree_util.tree_leaves(tree) gives the arrays; sum their squared entries, then take sqrt.",
            reference=primitives.global_norm,
            make_inputs=_pytree_inputs,
            jit=True,
        )
    )


_register_primitives()


# ----------------------------------------------------------------------------------------------
# Notebook 01 (Haiku DQN).


def _huber_inputs(rng: np.random.Generator) -> tuple:
    return (rng.normal(scale=3.0, size=(int(rng.integers(5, 40)),)).astype(np.float32), float(rng.uniform(0.5, 2.0)))


def _epsilon_inputs(rng: np.random.Generator) -> tuple:
    duration = int(rng.integers(100, 10_000))
    steps = rng.integers(0, 2 * duration, size=(16,)).astype(np.int32)
    return steps, float(rng.uniform(0.5, 1.0)), float(rng.uniform(0.0, 0.2)), duration


def _epsilon_reference(step, start: float, end: float, duration: int):
    import jax.numpy as jnp

    fraction = jnp.clip(jnp.asarray(step, jnp.float32) / duration, 0.0, 1.0)
    return start + fraction * (end - start)


def _replay_inputs(rng: np.random.Generator) -> tuple:
    import jax

    from labcore import replay

    capacity = int(rng.integers(8, 64))
    example = {"obs": np.zeros((3,), np.float32), "action": np.int32(0)}
    state = replay.init(example, capacity)
    count = int(rng.integers(1, capacity))  # partly full: sampling an empty slot shows
    state = replay.add_batch(
        state,
        {"obs": rng.normal(size=(count, 3)).astype(np.float32), "action": rng.integers(1, 4, size=(count,)).astype(np.int32)},
    )
    return state, jax.random.key(int(rng.integers(1 << 30))), int(rng.integers(1, 16))


def _register_dqn() -> None:
    from labcore import losses, replay

    register(
        Exercise(
            name="huber_loss",
            description="Huber loss of x (elementwise): 0.5 * x**2 where |x| <= delta, delta * (|x| - 0.5 * delta) beyond.\n"
            "Use jnp.where (or split |x| into a clipped part and the rest); no Python if on array values, "
            "so it works under jit.",
            reference=losses.huber_loss,
            make_inputs=_huber_inputs,
            jit=True,
        )
    )
    register(
        Exercise(
            name="epsilon_schedule",
            description="Linear epsilon: start at step 0, end at step `duration`, then flat; steps is an int array.\n"
            "fraction = clip(step / duration, 0, 1) with jnp.clip (Python min/max fail on traced arrays), "
            "then start + fraction * (end - start).",
            reference=_epsilon_reference,
            make_inputs=_epsilon_inputs,
            jit=True,
        )
    )
    register(
        Exercise(
            name="replay_sample",
            description="Sample a uniform batch from a replay.ReplayState: every leaf of state.storage, gathered.\n"
            "Draw indices = jax.random.randint(key, (batch_size,), 0, state.size) (only the filled slots), "
            "then jax.tree_util.tree_map(lambda leaf: leaf[indices], state.storage).",
            reference=replay.sample,
            make_inputs=_replay_inputs,
        )
    )


_register_dqn()


# ----------------------------------------------------------------------------------------------
# Notebook 02 (jit, vmap, pmap).

PMEAN_AXIS = "devices"  # the axis name the pmean'd update exercise is run under


def _regression_batch_inputs(rng: np.random.Generator) -> tuple:
    features = int(rng.integers(2, 9))
    batch = int(rng.integers(3, 40))
    return (
        rng.normal(size=(features,)).astype(np.float32),
        np.float32(rng.normal()),
        rng.normal(size=(batch, features)).astype(np.float32),
        rng.normal(size=(batch,)).astype(np.float32),
    )


def _per_example_loss_reference(w, b, xs, ys):
    import jax

    def one(x, y):
        return 0.5 * (x @ w + b - y) ** 2

    return jax.vmap(one)(xs, ys)


def _per_example_grads_reference(w, b, xs, ys):
    import jax

    def one(w, x, y):
        return 0.5 * (x @ w + b - y) ** 2

    return jax.vmap(jax.grad(one), in_axes=(None, 0, 0))(w, xs, ys)


def _pmean_devices() -> int:
    import jax

    return min(4, jax.device_count())


def _pmean_step_inputs(rng: np.random.Generator) -> tuple:
    features = int(rng.integers(2, 9))
    batch = _pmean_devices() * int(rng.integers(2, 9))
    return (
        rng.normal(size=(features,)).astype(np.float32),
        rng.normal(size=(batch, features)).astype(np.float32),
        rng.normal(size=(batch,)).astype(np.float32),
        float(rng.uniform(0.01, 0.5)),
    )


def _mse_sgd_step(w, xs, ys, learning_rate):
    import jax
    import jax.numpy as jnp

    grad = jax.grad(lambda w: jnp.mean(0.5 * (xs @ w - ys) ** 2))(w)
    return w - learning_rate * grad


def _pmean_step_reference(w, xs, ys, learning_rate):
    """The single-device step on the whole batch, as every replica should return it: [n, D]."""
    import jax.numpy as jnp

    return jnp.broadcast_to(_mse_sgd_step(w, xs, ys, learning_rate), (_pmean_devices(), *w.shape))


def _run_under_pmap(step):
    """Shard the batch over the devices, run ``step`` with jax.pmap, return every replica's weights."""
    import jax

    def run(w, xs, ys, learning_rate):
        n = _pmean_devices()
        shard = lambda a: a.reshape(n, a.shape[0] // n, *a.shape[1:])  # noqa: E731
        pmapped = jax.pmap(
            lambda w, x, y: step(w, x, y, learning_rate),
            axis_name=PMEAN_AXIS,
            in_axes=(None, 0, 0),
            devices=jax.devices()[:n],
        )
        return pmapped(w, shard(xs), shard(ys))

    return run


def _register_parallel() -> None:
    register(
        Exercise(
            name="vmap_loss",
            description="Per-example squared error 0.5 * (x @ w + b - y)**2 for a batch xs [B, D], ys [B] -> [B].\n"
            "Write the loss for ONE example (x: [D], y: []) and batch it with jax.vmap(one, in_axes=(0, 0)) "
            "(w and b are shared: close over them, or give them in_axes=None).",
            reference=_per_example_loss_reference,
            make_inputs=_regression_batch_inputs,
            jit=True,
        )
    )
    register(
        Exercise(
            name="per_example_grads",
            description="Gradient of each example's loss 0.5 * (x @ w + b - y)**2 with respect to w: xs [B, D] -> [B, D].\n"
            "jax.grad of the one-example loss gives [D]; jax.vmap(jax.grad(one), in_axes=(None, 0, 0))(w, xs, ys) "
            "maps it over the batch while sharing w (in PyTorch this needs functorch/torch.func).",
            reference=_per_example_grads_reference,
            make_inputs=_regression_batch_inputs,
            jit=True,
        )
    )
    register(
        Exercise(
            name="pmean_update",
            description=f"One data-parallel SGD step step(w, xs, ys, lr) on this device's shard, run under jax.pmap "
            f"with axis_name='{PMEAN_AXIS}'.\n"
            "grad = jax.grad(lambda w: jnp.mean(0.5 * (xs @ w - ys) ** 2))(w) is this shard's gradient; average it "
            f"over devices with jax.lax.pmean(grad, '{PMEAN_AXIS}') before returning w - lr * grad, so every replica "
            "takes the step a single device would take on the whole batch.",
            reference=_pmean_step_reference,
            make_inputs=_pmean_step_inputs,
            run_with=_run_under_pmap,
        )
    )


_register_parallel()


# ----------------------------------------------------------------------------------------------
# Notebook 05: masked policies and GAE.


def _masked_policy_inputs(rng: np.random.Generator) -> tuple:
    batch, actions = int(rng.integers(1, 40)), int(rng.integers(2, 16))
    logits = rng.normal(scale=rng.uniform(0.5, 10.0), size=(batch, actions)).astype(np.float32)
    mask = rng.random((batch, actions)) < rng.uniform(0.2, 0.9)
    legal_choice = rng.integers(0, actions, batch)
    mask[np.arange(batch), legal_choice] = True  # every row has a legal action...
    return logits, mask, legal_choice.astype(np.int32)  # ...and this is one of them


def _masked_log_prob_entropy_reference(logits, mask, action):
    from labcore import losses
    import jax.numpy as jnp

    log_probs = losses.masked_log_probs(logits, mask)
    chosen = jnp.take_along_axis(log_probs, action[:, None], axis=-1)[:, 0]
    return chosen, losses.masked_entropy(logits, mask)


def _gae_inputs(rng: np.random.Generator) -> tuple:
    steps, envs = int(rng.integers(1, 40)), int(rng.integers(1, 6))
    return (
        rng.normal(size=(steps, envs)).astype(np.float32),
        rng.normal(size=(steps, envs)).astype(np.float32),
        rng.random((steps, envs)) < 0.15,
        rng.normal(size=(envs,)).astype(np.float32),
        float(rng.uniform(0.9, 0.999)),
        float(rng.uniform(0.8, 1.0)),
    )


def _gae_reference(rewards, values, dones, last_value, gamma, gae_lambda):
    from labcore import losses

    return losses.gae_advantages(rewards, values, dones, last_value, gamma, gae_lambda)[0]


def _clipped_objective_inputs(rng: np.random.Generator) -> tuple:
    batch = int(rng.integers(1, 200))
    # ratios from 0.5 to 2, so that many are clipped on either side
    log_ratio = rng.uniform(-0.7, 0.7, size=(batch,)).astype(np.float32)
    return log_ratio, rng.normal(size=(batch,)).astype(np.float32), float(rng.uniform(0.05, 0.3))


def _clipped_objective_reference(log_ratio, advantages, clip_eps):
    from labcore import losses

    return losses.ppo_clipped_objective(log_ratio, advantages, clip_eps)


def _register_ppo() -> None:
    register(
        Exercise(
            name="masked_log_prob_entropy",
            description="(log pi(action), entropy) of the policy softmax(logits) restricted to the legal actions: "
            "logits [B, A], mask [B, A] bool, action [B] (always legal) -> ([B], [B]).\n"
            "Push illegal logits to a large negative number (jnp.where(mask, logits, -1e9)) rather than -inf, so "
            "no inf - inf NaN appears; take log_softmax of that; the entropy sums -p log p over LEGAL actions only "
            "(jnp.where(mask, p * log_p, 0.0)), so its maximum is log(number of legal actions).",
            reference=_masked_log_prob_entropy_reference,
            make_inputs=_masked_policy_inputs,
            jit=True,
            rtol=1e-4,
            atol=1e-5,
        )
    )
    register(
        Exercise(
            name="gae",
            description="Generalised advantage estimates: rewards, values, dones [T, E], last_value [E], gamma, lambda "
            "-> advantages [T, E].\n"
            "Go backwards in time: delta_t = r_t + gamma * V_{t+1} * (1 - done_t) - V_t and "
            "A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}, with V_T = last_value and A_T = 0. "
            "dones[t] means the episode ended AT step t, so step t does not look past it. "
            "jax.lax.scan(..., reverse=True) does the backward loop in one compiled op.",
            reference=_gae_reference,
            make_inputs=_gae_inputs,
            rtol=1e-4,
            atol=1e-5,
        )
    )
    register(
        Exercise(
            name="ppo_clipped_loss",
            description="PPO's clipped surrogate as a loss to minimise: log_ratio [B] (log pi_new - log pi_old), "
            "advantages [B], clip_eps -> [].\n"
            "ratio = exp(log_ratio); loss = -mean(min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)). The min makes "
            "the objective pessimistic: a ratio moving in the advantage's direction stops earning past the clip, "
            "one moving against it is never clipped.",
            reference=_clipped_objective_reference,
            make_inputs=_clipped_objective_inputs,
            jit=True,
        )
    )


_register_ppo()


# ----------------------------------------------------------------------------------------------
# Notebook 03: multi-process bookkeeping, checked without a cluster.


def _device_keys_inputs(rng: np.random.Generator) -> tuple:
    # never process 0, where forgetting the process offset would go unnoticed
    processes = int(rng.integers(2, 6))
    return int(rng.integers(0, 2**31)), int(rng.integers(1, processes)), int(rng.integers(1, 5))


def _device_keys_reference(seed, process_index, local_device_count):
    import jax
    import jax.numpy as jnp

    base = jax.random.key(seed)
    first = process_index * local_device_count  # global index of this process's first device
    return jnp.stack([jax.random.key_data(jax.random.fold_in(base, first + d)) for d in range(local_device_count)])


def _process_rows_inputs(rng: np.random.Generator) -> tuple:
    processes = int(rng.integers(2, 9))
    return int(processes * rng.integers(1, 65)), int(rng.integers(0, processes)), processes


def _process_rows_reference(global_batch, process_index, process_count):
    import jax.numpy as jnp

    per_process = global_batch // process_count
    return jnp.arange(process_index * per_process, (process_index + 1) * per_process)


def _weighted_mean_inputs(rng: np.random.Generator) -> tuple:
    processes, dim = int(rng.integers(2, 6)), int(rng.integers(1, 9))
    counts = rng.integers(1, 100, size=processes).astype(np.float32)
    return _jnp(rng.normal(size=(processes, dim))), _jnp(counts)


def _weighted_mean_reference(shard_means, counts):
    return (shard_means * counts[:, None]).sum(0) / counts.sum()


def _register_distributed() -> None:
    register(
        Exercise(
            name="device_keys",
            description="The raw PRNG key data of every LOCAL device of one process: (seed, process_index, "
            "local_device_count) -> uint32 [local_device_count, 2].\n"
            "Global device index = process_index * local_device_count + d; device d's key is "
            "jax.random.fold_in(jax.random.key(seed), global_index); return jax.random.key_data of each, stacked. "
            "Every process derives its keys from the one seed, so the same command twice gives the same run, and "
            "no two devices share a stream.",
            reference=_device_keys_reference,
            make_inputs=_device_keys_inputs,
            rtol=0.0,
            atol=0.0,
        )
    )
    register(
        Exercise(
            name="process_rows",
            description="Which rows of a global batch this process feeds: (global_batch, process_index, "
            "process_count) -> int [global_batch / process_count] row indices.\n"
            "Contiguous blocks in process order: process p owns rows p * n ... (p + 1) * n - 1 with "
            "n = global_batch // process_count (jnp.arange). This is the layout jax.make_array_from_process_local_data "
            "expects for a batch sharded over a 1-D mesh ordered by process.",
            reference=_process_rows_reference,
            make_inputs=_process_rows_inputs,
            rtol=0.0,
            atol=0.0,
        )
    )
    register(
        Exercise(
            name="weighted_gradient_mean",
            description="The global mean gradient from per-process mean gradients over UNEQUAL shards: "
            "shard_means [P, D], counts [P] (examples per process) -> [D].\n"
            "A plain mean of the P shard means (what pmean of the means gives) overweights small shards; weight "
            "each by its count: sum_p counts[p] * shard_means[p] / sum_p counts[p] (in a real run: psum of "
            "counts * mean and psum of counts).",
            reference=_weighted_mean_reference,
            make_inputs=_weighted_mean_inputs,
            jit=True,
        )
    )


_register_distributed()


# ----------------------------------------------------------------------------------------------
# Notebook 07: GFlowNets on HyperGrid.


def _hypergrid_reward_inputs(rng: np.random.Generator) -> tuple:
    # heights 5, 6, 9 and 11 put grid points exactly on the band edges 0.25 and 0.3
    ndim, height, n = int(rng.integers(1, 5)), int(rng.choice([5, 6, 8, 9, 11])), int(rng.integers(1, 60))
    return rng.integers(0, height, size=(n, ndim)).astype(np.int32), height


def _hypergrid_reward_reference(x, height):
    import jax.numpy as jnp

    from labcore.envs import hypergrid

    return hypergrid.reward(hypergrid.HyperGrid(int(x.shape[-1]), height), jnp.asarray(x))


def _trajectory_balance_inputs(rng: np.random.Generator) -> tuple:
    batch, steps = int(rng.integers(1, 30)), int(rng.integers(1, 20))
    log_pf = -rng.exponential(size=(batch, steps)).astype(np.float32)  # padding past each length is NOT zero
    log_pb = -rng.exponential(size=(batch, steps)).astype(np.float32)
    lengths = rng.integers(1, steps + 1, size=batch).astype(np.int32)
    return (np.float32(rng.normal()), log_pf, log_pb, lengths, rng.normal(size=batch).astype(np.float32))


def _trajectory_balance_reference(log_z, log_pf, log_pb, lengths, log_rewards):
    import jax.numpy as jnp

    valid = jnp.arange(log_pf.shape[1])[None, :] < lengths[:, None]
    residual = log_z + jnp.sum(jnp.where(valid, log_pf - log_pb, 0.0), axis=1) - log_rewards
    return jnp.mean(residual**2)


def _l1_inputs(rng: np.random.Generator) -> tuple:
    states, n = int(rng.integers(4, 300)), int(rng.integers(1, 5000))
    target = rng.dirichlet(np.ones(states))
    return rng.integers(0, states, size=n), target


def _l1_reference(terminal_indices, target):
    from labcore.envs import hypergrid

    counts = np.bincount(np.asarray(terminal_indices), minlength=len(target)).astype(np.float64)
    return hypergrid.l1_distance(counts / counts.sum(), target)


def _register_gflownet() -> None:
    register(
        Exercise(
            name="hypergrid_reward",
            description="The standard HyperGrid reward: x [N, D] int (coordinates in 0 .. height - 1), height -> [N] float32.\n"
            "a = |x / (height - 1) - 0.5| per coordinate; R = 0.1 + 0.5 * [every a_d > 0.25] + 2.0 * [every a_d in "
            "(0.3, 0.4)]. The bounds are strict: compare with a 1e-6 margin (a > 0.25 + 1e-6, 0.3 + 1e-6 < a < "
            "0.4 - 1e-6) so that points exactly on a band edge (height 5, 6, 9, 11) are outside it. jnp.all(..., "
            "axis=-1) is the product of indicators.",
            reference=_hypergrid_reward_reference,
            make_inputs=_hypergrid_reward_inputs,
        )
    )
    register(
        Exercise(
            name="trajectory_balance",
            description="The trajectory balance loss from per-step log-probabilities: log_z [], log_pf [B, T], log_pb "
            "[B, T], lengths [B] (actions in each trajectory, exit included), log_rewards [B] -> [].\n"
            "mean over b of (log Z + sum_{t < L_b} log P_F - sum_{t < L_b} log P_B - log R(x_b))^2. The steps past "
            "each length are padding and hold arbitrary numbers: mask them with "
            "jnp.arange(T)[None, :] < lengths[:, None] (jnp.where), do not just sum every column.",
            reference=_trajectory_balance_reference,
            make_inputs=_trajectory_balance_inputs,
            jit=True,
            rtol=1e-4,
            atol=1e-5,
        )
    )
    register(
        Exercise(
            name="l1_sum_form",
            description="L1 between the sampled and the target distribution, SUM form: terminal_indices [N] int in "
            "0 .. S - 1, target [S] -> float.\n"
            "Count the samples per state (np.bincount with minlength=S), divide by N, then sum |p_hat - p| over "
            "the S states. The result lies in [0, 2] (twice the total variation). Some libraries report the MEAN "
            "over states instead (this divided by S): say which when you compare numbers.",
            reference=_l1_reference,
            make_inputs=_l1_inputs,
        )
    )


_register_gflownet()


# ----------------------------------------------------------------------------------------------
# Notebook 04: the IQN port (NoisyLinear, the quantile Huber loss, the frame buffer's ring).


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
    """The PyTorch reference layer (labcore.torch_ref.irainbow.NoisyLinear) with these weights and this draw."""
    import torch

    from labcore.torch_ref import irainbow

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

    capacity, obs = states.shape
    config = iqn.IQNConfig(obs_size=obs, n_frames=n_frames, memory=capacity, batch_size=1)
    buf = iqn.buffer_init(config).replace(states=jnp.asarray(states), idx=jnp.int32(idx), size=jnp.int32(capacity))
    return iqn.buffer_current_state(buf, config)


def _run_with_static_frames(current_state):
    """jax.jit the learner's current_state with n_frames static and idx traced (as inside a jitted epoch)."""
    import jax

    return jax.jit(current_state, static_argnums=2)


def _register_iqn() -> None:
    register(
        Exercise(
            name="noisy_linear",
            description="The independent-Gaussian NoisyLinear forward as a pure function: x [B, in], kernel [in, out], "
            "bias [out], sigma_kernel [in, out], sigma_bias [out], eps_kernel [in, out], eps_bias [out], "
            "deterministic (a Python bool) -> [B, out].\n"
            "Training mode (deterministic=False) perturbs the WEIGHTS, every weight with its own draw: "
            "x @ (kernel + sigma_kernel * eps_kernel) + (bias + sigma_bias * eps_bias). Eval mode "
            "(deterministic=True) uses the means only: x @ kernel + bias. Not factorised noise, and no noise in "
            "eval mode. The checker runs your function jitted in both modes and compares (training, eval) "
            "with the PyTorch reference layer: output[0] is training mode, output[1] eval mode.",
            reference=_noisy_linear_reference,
            make_inputs=_noisy_linear_inputs,
            run_with=_run_in_both_modes,
            rtol=1e-5,
            atol=1e-5,
        )
    )
    register(
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
            rtol=1e-5,
            atol=1e-6,
        )
    )
    register(
        Exercise(
            name="current_state",
            description="The frames an agent stacks before its new observation: states [capacity, obs], idx [] int "
            "(the next row the buffer writes), n_frames -> [n_frames - 1, obs], the n_frames - 1 rows before idx, "
            "OLDEST first, wrapping around the end of the ring.\n"
            "rows = (idx - (n_frames - 1) + jnp.arange(n_frames - 1)) % capacity, then states[rows]. The checker "
            "jits your function with idx traced (n_frames static), so a Python `if idx < n_frames - 1:` "
            "branch, the plan's two-slice version, cannot work: let the modulo do the wrapping.",
            reference=_current_state_reference,
            make_inputs=_current_state_inputs,
            run_with=_run_with_static_frames,
            rtol=0.0,
            atol=0.0,
        )
    )


_register_iqn()


# ----------------------------------------------------------------------------------------------
# Notebook 06: precision and memory on accelerators.


def _tf32_inputs(rng: np.random.Generator) -> tuple:
    size = int(rng.integers(8, 200))
    x = (rng.standard_normal(size) * 10.0 ** rng.uniform(-6, 6, size)).astype(np.float32)
    # Exact ties (the 13 dropped bits are 1000...0), where round-half-up and ties-to-even differ,
    # and values just below and above a tie.
    bits = x.view(np.uint32).copy()
    ties = rng.random(size) < 0.3
    bits[ties] = (bits[ties] & np.uint32(0xFFFFE000)) | np.uint32(0x1000)
    x = bits.view(np.float32)
    return (np.concatenate([x, np.float32([0.0, -0.0, 1.0, -3.0, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11])]),)


def _tf32_reference(x):
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    lowest_kept = (bits >> 13) & 1  # ties go to the even neighbour
    rounded = ((bits + 0x0FFF + lowest_kept) & 0xFFFFE000).astype(np.uint32)
    return rounded.view(np.float32)


def _bf16_matmul_inputs(rng: np.random.Generator) -> tuple:
    m, k, n = (int(v) for v in rng.integers(1, 64, 3))
    # JAX arrays, so that an eager attempt runs JAX's matmul (NumPy's bfloat16 matmul answers in float32)
    return _jnp(rng.standard_normal((m, k)).astype(np.float32)), _jnp(rng.standard_normal((k, n)).astype(np.float32))


def _bf16_matmul_reference(x, w):
    import ml_dtypes

    # bfloat16 times bfloat16 is exact in float32 (8 + 8 significant bits): only the inputs' rounding
    # and the float32 sum remain, so float64 of the rounded inputs is the reference.
    rounded = [np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64) for a in (x, w)]
    return (rounded[0] @ rounded[1]).astype(np.float32)


def _minibatch_inputs(rng: np.random.Generator) -> tuple:
    num_envs = int(rng.choice([1, 3, 5, 6, 12, 16, 24, 32, 48, 64, 100]))
    num_steps = int(rng.choice([5, 7, 16, 32, 64, 100, 128]))
    return num_envs, num_steps, int(rng.integers(1, 33))


def _minibatch_reference(num_envs, num_steps, requested):
    batch = num_envs * num_steps
    return max(count for count in range(1, requested + 1) if batch % count == 0)


def _tree_bytes_inputs(rng: np.random.Generator) -> tuple:
    import ml_dtypes

    dtypes = [np.float32, np.float16, ml_dtypes.bfloat16, np.int8, np.uint8, np.int32, np.float64, np.bool_]
    tree = {}
    for layer in range(int(rng.integers(1, 5))):
        shape = tuple(int(s) for s in rng.integers(1, 40, int(rng.integers(0, 4))))
        dtype = dtypes[int(rng.integers(len(dtypes)))]
        tree[f"layer_{layer}"] = {"w": np.zeros(shape, dtype), "b": np.zeros(shape[-1:], np.float32)}
    return ([tree["layer_0"], tree],)


def _tree_bytes_reference(tree):
    import jax

    return sum(int(np.size(leaf)) * np.dtype(leaf.dtype).itemsize for leaf in jax.tree_util.tree_leaves(tree))


def _register_accelerators() -> None:
    register(
        Exercise(
            name="round_to_tf32",
            description="What a float32 value becomes as a TensorFloat-32 matmul input: x [N] float32 -> [N] float32 "
            "with only the top 10 of its 23 mantissa bits kept, rounded to the nearest such value, ties to even.\n"
            "View the bits as uint32 (jax.lax.bitcast_convert_type(x, jnp.uint32)). The 13 low bits go: add "
            "0x0FFF plus the lowest KEPT bit ((bits >> 13) & 1), then clear them with & 0xFFFFE000, and view the "
            "result as float32. Plain truncation (just the mask) is what you get wrong on half the inputs; "
            "adding 0x1000 rounds exact ties up instead of to even; bfloat16 keeps only 7 bits. "
            "jax.lax.reduce_precision(x, exponent_bits=8, mantissa_bits=10) computes the same: use it to test.",
            reference=_tf32_reference,
            make_inputs=_tf32_inputs,
            jit=True,
            rtol=0.0,
            atol=0.0,
        )
    )
    register(
        Exercise(
            name="bf16_matmul",
            description="A mixed-precision matmul, as a bfloat16 layer computes: x [M, K] float32, w [K, N] float32 "
            "-> [M, N] float32, with both inputs rounded to bfloat16 and the products summed in float32.\n"
            "jnp.dot(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), preferred_element_type=jnp.float32). "
            "A plain float32 matmul is too exact here (on a CPU; a TPU rounds to bfloat16 by default), and "
            "x.astype(bf16) @ w.astype(bf16) returns bfloat16: its result is rounded to 8 significant bits, "
            "which is the error mixed precision avoids by accumulating in float32.",
            reference=_bf16_matmul_reference,
            make_inputs=_bf16_matmul_inputs,
            jit=True,
            rtol=1e-4,
            atol=1e-4,
        )
    )
    register(
        Exercise(
            name="fit_minibatches",
            description="The minibatch count after shrinking PPO's batch: num_envs, num_steps, requested (ints) -> "
            "the largest count <= requested that divides num_envs * num_steps.\n"
            "Count down from requested until batch % count == 0. math.gcd(batch, requested) divides the "
            "batch too, but is not the largest such count (batch 2048, requested 6: gcd 2, answer 4).",
            reference=_minibatch_reference,
            make_inputs=_minibatch_inputs,
            trials=20,
            rtol=0.0,
            atol=0.0,
        )
    )
    register(
        Exercise(
            name="tree_bytes",
            description="Bytes a pytree of arrays occupies: tree (nested dicts of arrays of mixed dtypes) -> int.\n"
            "Sum leaf.size * leaf.dtype.itemsize over jax.tree_util.tree_leaves(tree). Counting elements, or "
            "assuming 4 bytes each, is wrong for bfloat16 (2), int8 and bool (1) and float64 (8) leaves; a "
            "scalar leaf (shape ()) still holds one element.",
            reference=_tree_bytes_reference,
            make_inputs=_tree_bytes_inputs,
            trials=10,
            rtol=0.0,
            atol=0.0,
        )
    )


_register_accelerators()
