"""Notebook 05's core exercise ``ape_x_epsilon_greedy``: each actor's own exploration rate, Ape-X's
(Horgan et al. 2018, section 4.1), judged by what the actions do, whatever way the answer splits its key:
the worked solution, the classic mistakes named by the rate they give, and the judge.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from labcore.course.exercises import behaviour
from labcore.course.exercises.checking import jnp_f32


# ----------------------------------------------------------------------------------------------
# Each actor's own exploration: Ape-X's epsilon-greedy (core)

APE_X_EPSILON, APE_X_ALPHA = 0.4, 7.0  # Horgan et al. (2018), section 4.1


def _ape_x_epsilon(actor_index: int, num_actors: int) -> float:
    from labcore.agents.dqn.actor_pool import ape_x_epsilon  # labcore's own, which the actor-learner uses

    return ape_x_epsilon(actor_index, num_actors, APE_X_EPSILON, APE_X_ALPHA)


def _ape_x_inputs(rng: np.random.Generator) -> tuple:
    rows, num_actions, num_actors = 2048, int(rng.integers(3, 7)), int(rng.integers(2, 9))
    q_values = jnp_f32(rng.normal(size=(rows, num_actions)))
    return q_values, int(rng.integers(0, num_actors)), num_actors, jax.random.key(int(rng.integers(0, 2**31)))


def _ape_x_reference(q_values, actor_index, num_actors, key):
    from labcore.nets.q_networks import epsilon_greedy

    return epsilon_greedy(q_values, _ape_x_epsilon(actor_index, num_actors), key)


def ape_x_epsilon_greedy_solution(q_values, actor_index, num_actors, key):
    if num_actors > 1:
        epsilon = 0.4 ** (1 + 7 * actor_index / (num_actors - 1))
    else:
        epsilon = 0.4  # one actor: Ape-X's base rate (the formula would divide by zero)
    explore_key, action_key = jax.random.split(key)
    rows, num_actions = q_values.shape
    explore = jax.random.uniform(explore_key, (rows,)) < epsilon  # a coin for every row
    random_actions = jax.random.randint(action_key, (rows,), 0, num_actions)
    return jnp.where(explore, random_actions, jnp.argmax(q_values, axis=-1))


def _ape_x_with(epsilon_of) -> Any:
    def ape_x(q_values, actor_index, num_actors, key):
        explore_key, action_key = jax.random.split(key)
        rows, num_actions = q_values.shape
        explore = jax.random.uniform(explore_key, (rows,)) < epsilon_of(actor_index, num_actors)
        return jnp.where(explore, jax.random.randint(action_key, (rows,), 0, num_actions), jnp.argmax(q_values, axis=-1))

    return ape_x


ape_x_divides_by_n = _ape_x_with(lambda i, n: 0.4 ** (1 + 7 * i / n))
ape_x_unnormalised = _ape_x_with(lambda i, n: 0.4 ** (1 + 7 * i))
ape_x_one_rate = _ape_x_with(lambda i, n: 0.4)
ape_x_reversed = _ape_x_with(lambda i, n: 0.4 ** (1 + 7 * (n - 1 - i) / (n - 1)) if n > 1 else 0.4)
ape_x_lone_actor_divides_by_zero = _ape_x_with(lambda i, n: 0.4 ** (1 + 7 * i / (n - 1)))  # N = 1: 0 / 0


def ape_x_one_coin(q_values, actor_index, num_actors, key):
    epsilon = _ape_x_epsilon(actor_index, num_actors)
    explore_key, action_key = jax.random.split(key)
    rows, num_actions = q_values.shape
    explore = jax.random.uniform(explore_key) < epsilon  # one coin for the whole batch
    return jnp.where(explore, jax.random.randint(action_key, (rows,), 0, num_actions), jnp.argmax(q_values, axis=-1))


def _ape_x_candidates(i: int, n: int) -> dict[str, float]:
    """The rates the classic mistakes give actor i of n, by what each does."""
    rates = {"Ape-X's rate": _ape_x_epsilon(i, n), "0.4 for every actor": 0.4}
    if n > 1:
        rates["i / N in the exponent where Ape-X has i / (N - 1)"] = 0.4 ** (1 + 7 * i / n)
        rates["i * alpha in the exponent, not divided by N - 1"] = 0.4 ** (1 + 7 * i)
        rates["the actors in reverse order (actor 0 the greediest)"] = 0.4 ** (1 + 7 * (n - 1 - i) / (n - 1))
    rates["no exploration at all"] = 0.0
    return rates


def judge_ape_x(ape_x, rng: np.random.Generator) -> str | None:
    """Ape-X's actors by what they do, on every call: the first actor, the last, one between and a lone
    actor; each actor's share of non-greedy actions against its rate (a random action is the greedy one
    1/A of the time), an independent coin for every row, the same draws for the same key and others for
    another. A rate that is off is named by the rule it follows."""
    num_actions, num_actors = int(rng.integers(3, 7)), int(rng.integers(3, 9))
    # one coin per row: actor 0 (epsilon 0.4) called with 24 keys; the shares of non-greedy actions of the
    # calls spread as independent rows' would, around their own mean (a wrong rate is named below)
    calls, rows_per_call = 24, 2000
    shares = []
    for _ in range(calls):
        q_values = jnp_f32(rng.normal(size=(rows_per_call, num_actions)))
        actions = ape_x(q_values, 0, num_actors, jax.random.key(int(rng.integers(0, 2**31))))
        problem = behaviour.shape_problem(actions, (rows_per_call,), "iu", f"actor 0 of {num_actors}'s actions")
        if problem:
            return problem
        shares.append(int((np.asarray(actions) != np.asarray(jnp.argmax(q_values, axis=-1))).sum()))
    pooled = sum(shares) / (calls * rows_per_call)
    if 0.0 < pooled < 1.0 and behaviour.dispersion_problem(np.asarray(shares), rows_per_call, pooled, "") is not None:
        return ("actor 0's share of exploring steps swings from call to call far more than independent rows' "
                "would: one coin for many rows, where every row needs its own")
    cases = [(0, num_actors), (num_actors - 1, num_actors), (int(rng.integers(1, num_actors - 1)), num_actors), (0, 1)]
    rows = 60_000
    for actor_index, n in cases:
        q_values = jnp_f32(rng.normal(size=(rows, num_actions)))
        key = jax.random.key(int(rng.integers(0, 2**31)))
        try:
            problem, actions = behaviour.key_reuse_problem(ape_x, q_values, actor_index, n, behaviour.copy_key(key))
        except ZeroDivisionError:
            if n == 1:
                return "a lone actor (N = 1) divides by N - 1 = 0: Ape-X's formula has no value there; it explores at 0.4"
            raise
        if problem:
            return problem
        problem = behaviour.shape_problem(actions, (rows,), "iu", f"actor {actor_index} of {n}'s actions")
        if problem:
            return problem
        actions = np.asarray(actions)
        if actions.min() < 0 or actions.max() >= num_actions:
            return f"actor {actor_index} of {n} chose actions outside 0..{num_actions - 1}"
        off_greedy = actions != np.asarray(jnp.argmax(q_values, axis=-1))
        want = _ape_x_epsilon(actor_index, n)
        rate = lambda eps: eps * (1.0 - 1.0 / num_actions)  # noqa: E731
        if behaviour.frequency_problem(int(off_greedy.sum()), rows, rate(want), "") is not None:
            fitting = [name for name, eps in _ape_x_candidates(actor_index, n).items()
                       if behaviour.frequency_problem(int(off_greedy.sum()), rows, rate(eps), "") is None]
            who = "a lone actor (N = 1)" if n == 1 else f"actor {actor_index} of {n}"
            if fitting and fitting[0] != "Ape-X's rate":
                return f"{who} explores as {fitting[0]} gives it, not at Ape-X's epsilon {want:.5f}"
            return (f"{who} takes a non-greedy action in {off_greedy.mean():.4f} of its steps, where Ape-X's epsilon "
                    f"{want:.5f} gives {rate(want):.4f} (a random action is the greedy one 1/{num_actions} of the time)")
        if want > 0.01:
            again = np.asarray(ape_x(q_values, actor_index, n, behaviour.copy_key(key)))
            if not np.array_equal(again, actions):
                return "the same key gave other actions: every draw must come from the key"
            other = np.asarray(ape_x(q_values, actor_index, n, jax.random.key(int(rng.integers(0, 2**31)))))
            if np.array_equal(other, actions):
                return "another key gave the same actions: the draws ignore the key"
    return None
