"""One side of one pair of ``benchmarks/peers.py``: train, time, evaluate, print one JSON line.

Run by peers.py with the interpreter of the side's own environment (labcore's, Rejax's, SBX's), so this
file imports no labcore at module level and nothing from peers.py:

    PYTHON benchmarks/peers_child.py '{"side": "rejax", "algorithm": "ppo", "env": "CartPole-v1",
                                       "config": {...}, "agents": 16, "seed": 0, "eval_episodes": 32}'

A jitted side (labcore, Rejax) is timed in two parts: lowering and compiling the whole training run
(``jax.jit(train)``, or ``jax.jit(jax.vmap(train))`` over ``agents`` keys), then running the compiled
program once to completion. A host-driven side (SBX, labcore's ``dqn-host``) compiles as it goes, so its
time is one number, compiles included. Every side is evaluated by the same code: greedy actions (the
argmax of the Q-values, or of the policy's logits), ``eval_episodes`` whole episodes per agent (at most
``EVALUATED_AGENTS`` agents), on gymnax's env for a jitted side and gymnasium's for the SBX pairs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

# Compile times are real compiles: labcore's persistent compilation cache would turn a second round's
# compile into a file read (labcore.compile_cache); JAX's own cache is off unless configured.
os.environ["LABCORE_COMPILATION_CACHE"] = "0"
# XLA's CPU scheduler, set before JAX starts, the same on both sides: the concurrency-optimised one off (as
# labcore's lessons and vmapped benchmarks run), unless the spec asks for XLA's default (peers.py --scheduler).
if __name__ == "__main__" and json.loads(sys.argv[1]).get("xla_scheduler", "off") == "off":
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_concurrency_optimized_scheduler=false").strip()

EVALUATED_AGENTS = 8  # a 128-agent run is evaluated on its first 8 agents


# ----------------------------------------------------------------------------------------------
# The shared evaluation


def evaluate_gymnax(greedy, params_per_agent: list, env_id: str, episodes: int, seed: int) -> list[float]:
    """Mean return per agent: ``greedy(params, obs [B, ...]) -> actions [B]`` for ``episodes`` whole episodes
    (each to its end or the env's step limit), on this environment's gymnax, every env reset by a key of its own.
    Works with gymnax's five-value ``step`` (0.0.x) and six-value one (1.x)."""
    import gymnax
    import jax
    import jax.numpy as jnp

    env, env_params = gymnax.make(env_id)
    limit = int(env_params.max_steps_in_episode)

    @jax.jit
    def play(params, key):
        reset_keys = jax.random.split(key, episodes)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, env_params)

        def step(carry, step_key):
            obs, state, total, running = carry
            action = greedy(params, obs)
            out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(jax.random.split(step_key, episodes), state, action, env_params)
            next_obs, next_state, reward, ended = out[0], out[1], out[2], out[3]
            if len(out) == 6:  # gymnax 1.x: terminated, truncated
                ended = jnp.logical_or(out[3], out[4])
            total = total + jnp.where(running, reward, 0.0)
            return (next_obs, next_state, total, jnp.logical_and(running, jnp.logical_not(ended))), None

        carry = (obs, state, jnp.zeros(episodes), jnp.ones(episodes, bool))
        (_, _, total, _), _ = jax.lax.scan(step, carry, jax.random.split(jax.random.fold_in(key, 1), limit))
        return total

    return [float(play(params, jax.random.key(seed + 10_000 + i)).mean()) for i, params in enumerate(params_per_agent)]


def evaluate_gymnasium(greedy, env_id: str, episodes: int, seed: int) -> float:
    """Mean return of ``greedy(obs [D]) -> action`` over ``episodes`` gymnasium episodes, seeds seed + 10,000 + i."""
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + 10_000 + episode)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(int(greedy(obs)))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return sum(returns) / len(returns)


def first_agents(tree, agents: int) -> list:
    """The parameters of each of the first ``EVALUATED_AGENTS`` agents of a vmapped run (or the one agent)."""
    import jax

    if agents == 1:
        return [tree]
    return [jax.tree_util.tree_map(lambda leaf, i=i: leaf[i], tree) for i in range(min(agents, EVALUATED_AGENTS))]


def voluntary_switches() -> int:
    """The times this process's threads gave up their core to wait so far (-1 where the OS does not say): XLA's
    CPU runtime does so when one of its threads waits for an op another runs."""
    try:
        import resource
    except ImportError:  # Windows
        return -1
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


def compiled_and_timed(train, agents: int, seed: int, inspect: dict | None = None) -> tuple[Any, float, float, int]:
    """(final state, compile seconds, run seconds, voluntary switches during the run) of the whole training run,
    ``agents`` vmapped runs at once.

    inspect (``benchmarks/peers_anatomy.py``): {"hlo": file} writes the compiled program's optimised HLO
    there, {"trace": folder} runs it once more under JAX's profiler into that folder, after the timed run."""
    import jax

    if agents == 1:
        fn, key = jax.jit(train), jax.random.key(seed)
    else:
        fn, key = jax.jit(jax.vmap(train)), jax.random.split(jax.random.key(seed), agents)
    started = time.perf_counter()
    call = fn.lower(key).compile()
    switches = voluntary_switches()
    compiled = time.perf_counter()
    out = jax.block_until_ready(call(key))
    run_s = time.perf_counter() - compiled
    switches = voluntary_switches() - switches if switches >= 0 else -1
    if inspect and inspect.get("hlo"):
        with open(inspect["hlo"], "w") as text:
            text.write(call.as_text())
    if inspect and inspect.get("trace"):
        with jax.profiler.trace(inspect["trace"]):
            jax.block_until_ready(call(key))
    return out, compiled - started, run_s, switches


# ----------------------------------------------------------------------------------------------
# labcore


def changed_labcore(variants: list[str], algorithm: str) -> None:
    """Change labcore's PPO or PQN in this process only, to time what a difference from a peer costs
    (``peers.py run --labcore-variant``; its LABCORE_VARIANTS says what each does). Nothing here is labcore's own
    behaviour: these are measurements' controls, each the smallest change that removes one difference."""
    if variants and algorithm not in VARIANT_ALGORITHMS:
        raise ValueError(f"--labcore-variant changes labcore's PPO and PQN only, not {algorithm!r}")
    for variant in variants:
        if variant == "element-clip":
            import optax

            # labcore's PPO and PQN build optax.chain(optax.clip_by_global_norm(max_grad_norm), ...): with this,
            # each gradient element is clipped at max_grad_norm instead, as Rejax's PPO and PQN do (optax.clip)
            optax.clip_by_global_norm = optax.clip
        elif variant == "no-metrics":
            import jax

            from labcore import logged_scan

            # PPO's and PQN's run(state, n) is logged_scan.scan_updates(update, ...); this one keeps the state and drops
            # each update's metrics, so that XLA removes whatever only computes them
            def without_metrics(update, state, num_updates, **_):
                state, _ = jax.lax.scan(lambda carry, _: (update(carry)[0], None), state, None, length=num_updates)
                return state, {}

            logged_scan.scan_updates = without_metrics
        else:
            raise ValueError(f"unknown labcore variant {variant!r}")


VARIANT_ALGORITHMS = ("ppo", "pqn")  # whose programs the variants change


def run_labcore(spec: dict) -> dict:
    import jax
    import jax.numpy as jnp

    algorithm, agents = spec["algorithm"], spec["agents"]
    changed_labcore(spec.get("labcore_variants", []), algorithm)
    config_fields = {name: tuple(value) if isinstance(value, list) else value for name, value in spec["config"].items()}
    if algorithm == "ppo":
        from labcore.agents.ppo import core as ppo

        config = ppo.PPOConfig(**config_fields)
        agent = ppo.make_ppo(config)
        (runner, _), compile_s, run_s, switches = compiled_and_timed(ppo.make_train(config), agents, spec["seed"], spec.get("inspect"))
        params, steps = runner.params, config.num_updates * config.num_envs * config.num_steps

        def greedy(params, obs):
            return agent.policy(params, obs, None)
    elif algorithm == "pqn":
        from labcore.agents.pqn import core as pqn

        config = pqn.PQNConfig(**config_fields)
        agent = pqn.make_pqn(config)
        (runner, _), compile_s, run_s, switches = compiled_and_timed(agent.train, agents, spec["seed"], spec.get("inspect"))
        params, steps = runner.params, config.num_updates * config.num_envs * config.num_steps

        def greedy(params, obs):
            return jnp.argmax(agent.network.apply(params, None, obs), axis=-1)
    elif algorithm == "dqn-scan":
        from labcore.agents.dqn import scan
        from labcore.agents.dqn.config import DQNConfig
        from labcore.nets.q_networks import make_q_network

        config = DQNConfig(**config_fields)
        (carry, _), compile_s, run_s, switches = compiled_and_timed(scan.make_train(config), agents, spec["seed"],
                                                                    spec.get("inspect"))
        params, steps = scan.params(carry), (config.total_steps // config.train_frequency) * config.train_frequency
        env = spec["env"]
        import gymnax

        gym_env, gym_params = gymnax.make(env)
        network = make_q_network(config.network, gym_env.action_space(gym_params).n, config.hidden_sizes)

        def greedy(params, obs):
            return jnp.argmax(network.apply(params, None, obs), axis=-1)
    elif algorithm == "dqn-host":
        from labcore.agents.dqn import host_loop
        from labcore.agents.dqn.config import DQNConfig

        config = DQNConfig(**config_fields)
        started = time.perf_counter()
        result = host_loop.train(config, progress=False, evaluate=False, tensorboard=False)
        run_s, compile_s = time.perf_counter() - started, None
        agent = host_loop.make_agent(config)
        act = jax.jit(lambda params, obs: jnp.argmax(agent.network.apply(params, None, obs[None]), axis=-1)[0])
        returns = [evaluate_gymnasium(lambda obs: act(result.state.params, jnp.asarray(obs)), spec["env"],
                                      spec["eval_episodes"], spec["seed"])]
        return _report(spec, compile_s, run_s, config.total_steps, returns, {"labcore": _version("labcore")})
    else:
        raise ValueError(f"labcore side: unknown algorithm {algorithm!r}")
    if spec.get("eval_on") == "gymnasium":  # the SBX pairs: labcore's jitted policy on gymnasium's env
        one = first_agents(params, agents)[0]
        act = jax.jit(lambda obs: greedy(one, obs[None])[0])
        returns = [evaluate_gymnasium(lambda obs: act(jnp.asarray(obs, jnp.float32)), spec["env"], spec["eval_episodes"],
                                      spec["seed"])]
    else:
        returns = evaluate_gymnax(greedy, first_agents(params, agents), spec["env"], spec["eval_episodes"], spec["seed"])
    return _report(spec, compile_s, run_s, steps * agents, returns, {"labcore": _version("labcore")}, switches)


# ----------------------------------------------------------------------------------------------
# Rejax


def run_rejax(spec: dict) -> dict:
    import jax.numpy as jnp
    import rejax

    fields = dict(spec["config"])
    # no evaluation inside the timed run: one evaluation interval of the whole run, none at the start, and
    # Rejax's own evaluation at the end of it (128 episodes in the compiled program: PPO sampling its policy,
    # DQN and PQN at epsilon 0.005) replaced by one that plays none; the shared evaluation below scores both sides
    fields.update(env=spec["env"], eval_freq=fields["total_timesteps"], skip_initial_evaluation=True)
    algo = rejax.get_algo(spec["algorithm"]).create(**fields).replace(eval_callback=lambda algo, ts, rng: jnp.zeros(()))
    (state, _), compile_s, run_s, switches = compiled_and_timed(algo.train, spec["agents"], spec["seed"], spec.get("inspect"))
    if spec["algorithm"] == "ppo":
        params = state.actor_ts.params

        def greedy(params, obs):
            return algo.actor.apply(params, obs, method="_action_dist").mode()
    else:  # dqn, pqn, iqn: the argmax of the Q-values
        params = state.q_ts.params

        def greedy(params, obs):
            return jnp.argmax(algo.agent.apply(params, obs), axis=-1)
    steps = _rejax_steps(algo, spec["algorithm"])
    returns = evaluate_gymnax(greedy, first_agents(params, spec["agents"]), spec["env"], spec["eval_episodes"], spec["seed"])
    return _report(spec, compile_s, run_s, steps * spec["agents"], returns,
                   {"rejax": _version("rejax"), "gymnax": _version("gymnax")}, switches)


def _rejax_steps(algo, algorithm: str) -> int:
    """The env steps a Rejax run takes: whole iterations per evaluation interval (Rejax's own rounding up)."""
    import math

    if algorithm in ("ppo", "pqn"):
        per_iteration = algo.num_envs * algo.num_steps
    else:
        per_iteration = algo.num_envs
    return math.ceil(algo.eval_freq / per_iteration) * per_iteration * math.ceil(algo.total_timesteps / algo.eval_freq)


# ----------------------------------------------------------------------------------------------
# SBX


def run_sbx(spec: dict) -> dict:
    import sbx
    from stable_baselines3.common.env_util import make_vec_env

    fields = dict(spec["config"])
    total_steps = fields.pop("n_timesteps")
    n_envs = fields.pop("n_envs", 1)
    env = make_vec_env(spec["env"], n_envs=n_envs, seed=spec["seed"])
    model = getattr(sbx, spec["algorithm"].upper())("MlpPolicy", env, seed=spec["seed"], verbose=0, **fields)
    started = time.perf_counter()
    model.learn(total_timesteps=total_steps)
    run_s = time.perf_counter() - started
    returns = [evaluate_gymnasium(lambda obs: model.predict(obs, deterministic=True)[0], spec["env"],
                                  spec["eval_episodes"], spec["seed"])]
    return _report(spec, None, run_s, total_steps, returns,
                   {"sbx-rl": _version("sbx-rl"), "stable-baselines3": _version("stable-baselines3")})


# ----------------------------------------------------------------------------------------------


def _version(package: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _report(spec: dict, compile_s: float | None, run_s: float, steps: int, returns: list[float], versions: dict,
            switches: int | None = None) -> dict:
    """The side's PEERS_RESULT; ``switches``: its voluntary context switches during a compiled side's timed run
    (None for a host-driven side, whose run is not one call)."""
    import jax

    return {"side": spec["side"], "compile_s": compile_s, "run_s": run_s, "steps": int(steps),
            "steps_per_s": steps / run_s, "return_mean": sum(returns) / len(returns), "agent_returns": returns,
            "voluntary_switches": switches,
            "versions": {"jax": jax.__version__, **versions}}


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    run = {"labcore": run_labcore, "rejax": run_rejax, "sbx": run_sbx}[spec["side"]]
    print("PEERS_RESULT " + json.dumps(run(spec)))
