"""labcore beside the JAX RL libraries a user would pick instead: Rejax and SBX, on the same work, in one run.

Each peer is installed, pinned, into an environment of its own (never into labcore's), under
``$LABCORE_PEERS_DIR`` (default ``~/.cache/labcore/peers``). Each pair trains the same algorithm on the same
env with settings translated field by field, labcore in this interpreter's environment and the peer in its
own, each side in a process of its own (``benchmarks/peers_child.py``), the sides' order swapped from one
round to the next. A row reports env steps per second once compiled (a host-driven side, SBX or labcore's
``dqn-host``, compiles as it runs: its time includes the compiles), compile seconds, the final greedy return
(the same evaluation code on both sides), and labcore's rate over the peer's (above 1: labcore faster).

    python benchmarks/peers.py setup                       # build the peers' environments (about a minute each)
    python benchmarks/peers.py run                         # every pair, two rounds
    python benchmarks/peers.py run --pairs ppo-cartpole-purejaxrl --agents 1 16 128
    python benchmarks/peers.py run --scale 0.02 --rounds 1 --pairs ppo-cartpole-rejax   # a tiny budget
    python benchmarks/peers.py run --resume                # after a stop: only the sides still missing

Writes benchmarks/results/peers.json and prints a markdown table (``--out`` elsewhere). Each side's result is
appended to ``peers-sides.jsonl`` there as it ends, which ``--resume`` reads back.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
CHILD = HERE / "peers_child.py"
REJAX_CONFIGS = "github.com/keraJLi/rejax at d751095"


@dataclasses.dataclass(frozen=True)
class Peer:
    """A library installed, pinned, in an environment of its own."""

    name: str
    version: str
    requirements: tuple[str, ...]  # pip requirement lines, every version pinned

    def folder(self) -> pathlib.Path:
        root = os.environ.get("LABCORE_PEERS_DIR") or pathlib.Path.home() / ".cache" / "labcore" / "peers"
        return pathlib.Path(root) / f"{self.name}-{self.version}"

    def python(self) -> pathlib.Path:
        return self.folder() / "bin" / "python"

    def marker(self) -> pathlib.Path:
        """Written last by ``setup``: the hash of the requirements the environment was built with."""
        return self.folder() / "labcore-peer.json"

    def requirements_hash(self) -> str:
        return hashlib.sha256("\n".join(self.requirements).encode()).hexdigest()[:16]

    def ready(self) -> bool:
        try:
            return json.loads(self.marker().read_text())["requirements"] == self.requirements_hash()
        except (OSError, ValueError, KeyError):
            return False


def labcore_pins() -> dict[str, str]:
    """The versions labcore runs with here, so that a peer gets the same JAX (the comparison is of the code)."""
    from importlib import metadata

    return {name: metadata.version(name) for name in ("jax", "jaxlib", "flax", "optax", "chex", "distrax", "gymnasium")}


def peers() -> dict[str, Peer]:
    pins = labcore_pins()
    same = [f"{name}=={pins[name]}" for name in ("jax", "jaxlib")]
    return {
        # Rejax 0.1.3 steps gymnax envs with the five-value step of gymnax 0.0.x (labcore's gymnax 1.x returns six)
        "rejax": Peer("rejax", "0.1.3", ("rejax==0.1.3", "gymnax==0.0.9", *same, f"flax=={pins['flax']}",
                                         f"optax=={pins['optax']}", f"chex=={pins['chex']}", f"distrax=={pins['distrax']}")),
        # SBX pulls in Stable-Baselines3 and PyTorch: the CPU wheel, never a CUDA one
        "sbx": Peer("sbx", "0.28.0", ("sbx-rl==0.28.0", "torch==2.13.0+cpu", *same, f"gymnasium=={pins['gymnasium']}")),
    }


def setup(peer: Peer, quiet: bool = True) -> pathlib.Path:
    """Build the peer's environment unless it is there with the same requirements; returns its python."""
    if peer.ready():
        return peer.python()
    folder = peer.folder()
    folder.parent.mkdir(parents=True, exist_ok=True)
    base = getattr(sys, "_base_executable", sys.executable)  # the interpreter labcore's venv was made from
    subprocess.run([base, "-m", "venv", "--clear", str(folder)], check=True)
    command = [str(peer.python()), "-m", "pip", "install", *(["-q"] if quiet else []), *peer.requirements]
    subprocess.run(command, check=True)
    peer.marker().write_text(json.dumps({"requirements": peer.requirements_hash(), "pins": list(peer.requirements)}) + "\n")
    return peer.python()


# ----------------------------------------------------------------------------------------------
# The pairs: the same work on both sides, and what could not be made the same


@dataclasses.dataclass(frozen=True)
class Pair:
    name: str
    peer: str  # a key of peers()
    algorithm: str  # labcore's side: ppo, pqn, dqn-scan, dqn-host
    peer_algorithm: str  # the peer's: ppo, pqn, dqn
    env: str
    source: str  # where the settings come from
    labcore: dict[str, Any]  # labcore's config fields
    peer_config: dict[str, Any]  # the peer's, in its own field names
    unmatched: tuple[str, ...]  # settings one side cannot take, each said
    agents: tuple[int, ...] = (1,)  # vmapped agents both sides run at once
    total_steps_field: tuple[str, str] = ("total_steps", "total_timesteps")  # (labcore's, the peer's)
    eval_on: str = "gymnax"
    eval_episodes: int = 32

    def scaled(self, scale: float) -> Pair:
        """The same pair with every step count multiplied by ``scale`` (a tiny budget for a test)."""
        if scale == 1.0:
            return self
        labcore_steps, peer_steps = self.total_steps_field
        labcore, peer = dict(self.labcore), dict(self.peer_config)
        unit = _iteration_steps(self)
        for fields, name in ((labcore, labcore_steps), (peer, peer_steps)):
            fields[name] = max(2 * unit, int(fields[name] * scale) // unit * unit)
        for fields, name in ((labcore, "learning_starts"), (peer, "fill_buffer"), (peer, "learning_starts")):
            if name in fields:
                fields[name] = max(unit, int(fields[name] * scale) // unit * unit)
        return dataclasses.replace(self, labcore=labcore, peer_config=peer, eval_episodes=4)


def _iteration_steps(pair: Pair) -> int:
    fields = pair.labcore
    if pair.algorithm in ("ppo", "pqn"):
        return fields["num_envs"] * fields["num_steps"]
    return fields.get("train_frequency", 1)


PUREJAXRL_PPO = dict(env_id="CartPole-v1", num_envs=4, num_steps=128, total_steps=499_712, learning_rate=2.5e-4,
                     anneal_lr=True, gamma=0.99, gae_lambda=0.95, num_minibatches=4, update_epochs=4, clip_eps=0.2,
                     vf_coef=0.5, ent_coef=0.01, max_grad_norm=0.5, hidden_size=64, num_layers=2, activation="tanh")

PPO_DIFFERENCES = (
    "gradient clipping: Rejax clips each gradient element (optax.clip), labcore the global norm (clip_by_global_norm)",
    "optimisers: Rejax steps the actor and the critic with an Adam each, one after the other; labcore one Adam on "
    "the summed loss",
    "initial weights: labcore orthogonal (PureJaxRL's); Rejax Flax's default",
    "Adam's epsilon: labcore 1e-5, Rejax optax's default (1e-8)",
)

def rejax_ppo_sides(env_id: str, *, num_envs: int, num_steps: int, total_steps: int, learning_rate: float, gamma: float,
                    epochs: int, minibatches: int, max_grad_norm: float) -> dict[str, dict]:
    """One set of PPO settings written as both sides of a Rejax pair (labcore's PPOConfig fields, Rejax's PPO
    fields); the fixed rest (lambda 0.95, clip 0.2, vf 0.5, entropy 0.01, a 64 x 2 tanh MLP) is the same on both."""
    shared = dict(gae_lambda=0.95, clip_eps=0.2, vf_coef=0.5, ent_coef=0.01, gamma=gamma, num_envs=num_envs,
                  num_steps=num_steps, num_minibatches=minibatches, learning_rate=learning_rate, max_grad_norm=max_grad_norm)
    return {"labcore": dict(env_id=env_id, total_steps=total_steps, anneal_lr=False, update_epochs=epochs, hidden_size=64,
                            num_layers=2, activation="tanh", bootstrap_truncation=False, **shared),
            "peer_config": dict(agent_kwargs={"activation": "tanh"}, total_timesteps=total_steps, num_epochs=epochs,
                                **shared)}


PAIRS: tuple[Pair, ...] = (
    Pair(
        "ppo-cartpole-rejax", "rejax", "ppo", "ppo", "CartPole-v1", f"Rejax's configs/gymnax/cartpole.yaml ({REJAX_CONFIGS})",
        **rejax_ppo_sides("CartPole-v1", num_envs=5, num_steps=100, total_steps=100_000, learning_rate=7.5e-4,
                          gamma=0.99, epochs=5, minibatches=5, max_grad_norm=0.5),
        unmatched=PPO_DIFFERENCES, agents=(1, 16)),
    Pair(
        "ppo-cartpole-purejaxrl", "rejax", "ppo", "ppo", "CartPole-v1", "labcore's PPOConfig.cartpole (PureJaxRL's "
        "CartPole settings); 976 updates of 512 steps",
        labcore=PUREJAXRL_PPO,
        peer_config=dict(agent_kwargs={"activation": "tanh"}, num_envs=4, num_steps=128, num_epochs=4, num_minibatches=4,
                         learning_rate=2.5e-4, max_grad_norm=0.5, total_timesteps=499_712, gamma=0.99, gae_lambda=0.95,
                         clip_eps=0.2, ent_coef=0.01, vf_coef=0.5),
        unmatched=(*PPO_DIFFERENCES, "learning rate: labcore decays it linearly to 0 (anneal_lr, PureJaxRL's); Rejax "
                   "keeps it constant", "time limits: labcore bootstraps a truncated episode from its last observation; "
                   "Rejax treats it as terminal"),
        agents=(1, 16, 128)),
    Pair(
        "pqn-cartpole-rejax", "rejax", "pqn", "pqn", "CartPole-v1", f"Rejax's configs/gymnax/cartpole.yaml ({REJAX_CONFIGS})",
        labcore=dict(env_id="CartPole-v1", hidden_sizes=(64, 64), layer_norm=True, num_envs=16, num_steps=128,
                     total_steps=524_288, learning_rate=3e-4, anneal_lr=False, optimizer="adam", max_grad_norm=10.0,
                     gamma=0.99, q_lambda=0.9, num_minibatches=16, update_epochs=5, epsilon_start=1.0, epsilon_end=0.05,
                     exploration_fraction=0.5, bootstrap_truncation=False),
        peer_config=dict(num_envs=16, num_steps=128, num_minibatches=16, max_grad_norm=10, learning_rate=3e-4, num_epochs=5,
                         total_timesteps=524_288, eps_start=1, eps_end=0.05, exploration_fraction=0.5, gamma=0.99,
                         td_lambda=0.9),
        unmatched=("gradient clipping: Rejax per element, labcore the global norm",
                   "the Q-value of each next observation: Rejax runs the network on it inside every env step; labcore "
                   "keeps the acting pass's values and runs one pass after the rollout"),
        agents=(1, 16)),
    Pair(
        "pqn-cartpole-labcore", "rejax", "pqn", "pqn", "CartPole-v1", "labcore's PQNConfig.cartpole, at Rejax's fixed "
        "network width",
        labcore=dict(env_id="CartPole-v1", hidden_sizes=(64, 64), num_envs=32, num_steps=64, total_steps=499_712,
                     learning_rate=1e-4, num_minibatches=16, update_epochs=4, q_lambda=0.95, epsilon_end=0.05,
                     exploration_fraction=0.2),
        peer_config=dict(num_envs=32, num_steps=64, num_minibatches=16, max_grad_norm=10, learning_rate=1e-4, num_epochs=4,
                         total_timesteps=499_712, eps_start=1, eps_end=0.05, exploration_fraction=0.2, gamma=0.99,
                         td_lambda=0.95),
        unmatched=("network width: Rejax's PQN network is 64 x 2 whatever the config (labcore's default is 128 x 2); "
                   "both run 64 x 2", "optimiser: labcore RAdam (purejaxql's), Rejax Adam",
                   "gradient clipping: Rejax per element, labcore the global norm",
                   "time limits: labcore bootstraps a truncated episode; Rejax treats it as terminal")),
    Pair(
        "dqn-cartpole-rejax", "rejax", "dqn-scan", "dqn", "CartPole-v1", f"Rejax's configs/gymnax/cartpole.yaml "
        f"({REJAX_CONFIGS}), at one update per 2 transitions on both sides",
        labcore=dict(env_id="CartPole-v1", network="mlp", hidden_sizes=(64, 64), total_steps=100_000, buffer_size=50_000,
                     batch_size=100, gamma=0.99, learning_rate=1e-3, learning_starts=5_000, num_envs=2, train_frequency=2,
                     target_update_frequency=2, target_update_rate=0.02, double_dqn=True, max_grad_norm=10.0,
                     epsilon_start=1.0, epsilon_end=0.05, exploration_fraction=0.5),
        peer_config=dict(agent="QNetwork", agent_kwargs={"activation": "relu"}, num_envs=2, num_epochs=1, buffer_size=50_000,
                         fill_buffer=5_000, batch_size=100, max_grad_norm=10, learning_rate=1e-3, total_timesteps=100_000,
                         polyak=0.98, target_update_freq=2, eps_start=1, eps_end=0.05, exploration_fraction=0.5,
                         gamma=0.99, ddqn=True),
        unmatched=("envs and updates: Rejax's config steps 10 envs and makes 5 updates per step; labcore makes one update "
                   "per iteration, so both run 2 envs and one update per step (the same updates per transition)",
                   "network: Rejax's config asks for a dueling network with swish; both run a plain 64 x 2 ReLU MLP",
                   "gradient clipping: Rejax per element, labcore the global norm"),
        agents=(1, 16)),
    Pair(
        "ppo-minatar-rejax", "rejax", "ppo", "ppo", "Breakout-MinAtar", f"Rejax's benchmark/breakout_1m.yaml "
        f"({REJAX_CONFIGS})",
        **rejax_ppo_sides("Breakout-MinAtar", num_envs=32, num_steps=32, total_steps=999_424, learning_rate=2.5674e-4,
                          gamma=0.995, epochs=4, minibatches=4, max_grad_norm=1.0),
        unmatched=PPO_DIFFERENCES),
    Pair(
        "dqn-minatar-rejax", "rejax", "dqn-scan", "dqn", "Breakout-MinAtar", f"Rejax's benchmark/breakout_1m.yaml "
        f"({REJAX_CONFIGS}), 100k of its 1M steps",
        labcore=dict(env_id="Breakout-MinAtar", network="mlp", hidden_sizes=(64, 64), total_steps=100_000,
                     buffer_size=100_000, batch_size=100, gamma=0.99, learning_rate=5e-4, learning_starts=20_000,
                     num_envs=1, train_frequency=1, target_update_frequency=1_000, max_grad_norm=10.0, epsilon_start=1.0,
                     epsilon_end=0.05, exploration_fraction=0.5),
        peer_config=dict(agent="QNetwork", agent_kwargs={"activation": "relu"}, num_envs=1, num_epochs=1,
                         buffer_size=100_000, fill_buffer=20_000, batch_size=100, max_grad_norm=10, learning_rate=5e-4,
                         total_timesteps=100_000, target_update_freq=1_000, polyak=0.0, eps_start=1, eps_end=0.05,
                         exploration_fraction=0.5, gamma=0.99, ddqn=False),
        unmatched=("network: the config names a ConvQNetwork, which Rejax 0.1.3's DQN does not build (it knows QNetwork "
                   "and DuelingQNetwork); both run a 64 x 2 ReLU MLP on the flattened grid",
                   "discount: the config's gamma 1.0 is refused by labcore's validation (gamma < 1); both run 0.99",
                   "gradient clipping: Rejax per element, labcore the global norm")),
    Pair(
        "pqn-minatar-labcore", "rejax", "pqn", "pqn", "Breakout-MinAtar", "labcore's PQNConfig.minatar (the PQN paper's), "
        "1M of its 10M steps, at Rejax's network",
        labcore=dict(env_id="Breakout-MinAtar", network="mlp", hidden_sizes=(64, 64), num_envs=128, num_steps=32,
                     total_steps=999_424, learning_rate=5e-4, anneal_lr=True, num_minibatches=32, update_epochs=2,
                     q_lambda=0.65, epsilon_end=0.05, exploration_fraction=0.1),
        peer_config=dict(num_envs=128, num_steps=32, num_minibatches=32, max_grad_norm=10, learning_rate=5e-4, num_epochs=2,
                         total_timesteps=999_424, eps_start=1, eps_end=0.05, exploration_fraction=0.1, gamma=0.99,
                         td_lambda=0.65),
        unmatched=("network: labcore's preset runs the MinAtar paper's CNN; Rejax's PQN is a 64 x 2 MLP whatever the "
                   "config, so both run that MLP on the flattened grid",
                   "learning rate: labcore decays it linearly (the paper's); Rejax keeps it constant",
                   "optimiser: labcore RAdam, Rejax Adam", "gradient clipping: Rejax per element, labcore the global norm")),
    Pair(
        "dqn-cartpole-sbx", "sbx", "dqn-host", "dqn", "CartPole-v1", "RL Baselines3 Zoo's hyperparams/dqn.yml, "
        "CartPole-v1 (github.com/DLR-RM/rl-baselines3-zoo at 019107e)",
        labcore=dict(env_id="CartPole-v1", network="mlp", hidden_sizes=(64, 64), total_steps=200_000, buffer_size=100_000,
                     batch_size=512, gamma=0.99, learning_rate=2.5e-4, learning_starts=512, train_frequency=4,
                     target_update_frequency=5_000, epsilon_start=1.0, epsilon_end=0.11, exploration_fraction=0.06,
                     max_grad_norm=None),
        peer_config=dict(n_timesteps=200_000, learning_rate=2.5e-4, batch_size=512, buffer_size=100_000,
                         learning_starts=512, gamma=0.99, target_update_interval=5_000, train_freq=4, gradient_steps=1,
                         exploration_fraction=0.06, exploration_final_eps=0.11, policy_kwargs={"net_arch": [64, 64]}),
        unmatched=("updates: the Zoo's config makes 4 gradient steps every 16 env steps; labcore one update every "
                   "train_frequency agent steps, so both make one every 4",
                   "learning_starts: the Zoo's 0; labcore's replay needs a batch first, so both start at 512",
                   "network: SBX's default is 256 x 2; both run 64 x 2",
                   "gradient clipping: SBX's DQN has none (Stable-Baselines3's clips at 10); neither side clips"),
        total_steps_field=("total_steps", "n_timesteps"), eval_on="gymnasium", eval_episodes=16),
    Pair(
        "ppo-cartpole-sbx", "sbx", "ppo", "ppo", "CartPole-v1", "RL Baselines3 Zoo's hyperparams/ppo.yml, CartPole-v1 "
        "(github.com/DLR-RM/rl-baselines3-zoo at 00128b5)",
        labcore=dict(env_id="CartPole-v1", num_envs=8, num_steps=32, total_steps=99_840, learning_rate=1e-3, anneal_lr=True,
                     gamma=0.98, gae_lambda=0.8, num_minibatches=1, update_epochs=20, clip_eps=0.2, vf_coef=0.5,
                     ent_coef=0.0, max_grad_norm=0.5, hidden_size=64, num_layers=2, activation="tanh"),
        peer_config=dict(n_timesteps=99_840, n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                         ent_coef=0.0, learning_rate=1e-3, clip_range=0.2),
        unmatched=("environments: labcore's PPO steps gymnax's CartPole inside its compiled program; SBX steps "
                   "gymnasium's from Python (both are evaluated on gymnasium's)",
                   "schedules: the Zoo decays the learning rate and the clip range linearly (lin_0.001, lin_0.2); labcore decays "
                   "the learning rate (anneal_lr) and keeps the clip range at 0.2; SBX, given plain numbers here, keeps both "
                   "constant",
                   "network: SBX's PPO default is 64 x 2 tanh, as labcore's here"),
        total_steps_field=("total_steps", "n_timesteps"), eval_on="gymnasium", eval_episodes=16),
)

UNMATCHED_ALGORITHMS = (
    "IQN: Rejax's IQN learns gymnax envs; labcore's is a port of a multi-agent treasure hunt (notebook 06), its "
    "agents stepped together in one world, with no gymnax driver, so there is no common task to time",
)


# ----------------------------------------------------------------------------------------------
# Running


def run_side(python: pathlib.Path | str, spec: dict, timeout_s: float) -> dict:
    """One side of a pair in a process of its own: its PEERS_RESULT line, parsed."""
    finished = subprocess.run([str(python), str(CHILD), json.dumps(spec)], capture_output=True, text=True,
                              timeout=timeout_s, cwd=HERE.parent)
    for line in finished.stdout.splitlines():
        if line.startswith("PEERS_RESULT "):
            return json.loads(line.removeprefix("PEERS_RESULT "))
    raise RuntimeError(f"{spec['side']} side of {spec['pair']} (agents {spec['agents']}) failed "
                       f"(exit {finished.returncode}):\n{finished.stderr[-3000:]}")


# XLA's CPU scheduler both sides run under (``--scheduler``): "off", the concurrency-optimised one turned off
# (``--xla_cpu_enable_concurrency_optimized_scheduler=false``, as labcore's lessons and vmapped benchmarks run), or
# XLA's "default". peers_child.py sets it before JAX starts.
SCHEDULERS = ("off", "default")


# What ``run --labcore-variant`` changes in labcore's PPO or PQN, in the labcore side's process only (peers_child.py's
# changed_labcore), to time one difference from a peer that no config field switches
LABCORE_VARIANTS = {
    "element-clip": "each gradient element clipped at max_grad_norm (optax.clip, as Rejax's PPO and PQN) instead of "
                    "the global norm (optax.clip_by_global_norm)",
    "no-metrics": "no per-update metrics returned (PPO's finished episodes' mean return and length, losses, entropy, "
                  "KL, clip fraction, invalid-action rate; PQN's mean return, loss, mean Q-value, gradient norm), so "
                  "that XLA may drop what only computes them",
}


def spec_of(pair: Pair, side: str, agents: int, scheduler: str = "off", variants: tuple[str, ...] = ()) -> dict:
    config = pair.labcore if side == "labcore" else pair.peer_config
    spec = {"pair": pair.name, "side": side, "algorithm": pair.algorithm if side == "labcore" else pair.peer_algorithm,
            "env": pair.env, "config": config, "agents": agents, "seed": 0, "eval_episodes": pair.eval_episodes,
            "eval_on": pair.eval_on}
    # each only when set: the sides a run recorded before the option existed keep their keys for --resume
    if scheduler != "off":
        spec["xla_scheduler"] = scheduler
    if variants and side == "labcore":
        spec["labcore_variants"] = list(variants)
    return spec


SIDES_NAME = "peers-sides.jsonl"  # under --out: one line per side run, so that --resume goes on from the last


def side_key(round_: int, spec: dict) -> str:
    """What makes two side runs the same run: the round and everything the child is given."""
    return hashlib.sha256(json.dumps({"round": round_, **spec}, sort_keys=True).encode()).hexdigest()[:16]


def run(pairs: list[Pair], rounds: int, agent_counts: list[int] | None, timeout_s: float,
        sides_file: pathlib.Path, resume: bool = False, scheduler: str = "off",
        variants: tuple[str, ...] = ()) -> tuple[list[dict], float, list[str]]:
    """Every (pair, agents) timed in ``rounds`` rounds, the sides' order swapped each round -> (rows, seconds,
    the dates of the first and the last side).

    Each side's result is appended to ``sides_file`` as it ends; with ``resume`` the sides already there
    (the same round and the same spec) are read back instead of run again, so a run stopped part-way
    goes on where it stopped. The seconds are the sides' own times added up, read back ones included."""
    pythons = {"labcore": sys.executable, **{name: setup(peer) for name, peer in peers().items()
                                             if any(pair.peer == name for pair in pairs)}}
    done: dict[str, dict] = {}
    if resume and sides_file.exists():
        for line in sides_file.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                done[entry["key"]] = entry
    elif sides_file.exists():
        sides_file.unlink()
    sides_file.parent.mkdir(parents=True, exist_ok=True)
    jobs = [(pair, agents) for pair in pairs for agents in pair.agents if agent_counts is None or agents in agent_counts]
    results: dict[tuple[str, int], dict[str, list[dict]]] = {}
    seconds, dates = 0.0, []
    for round_ in range(rounds):
        for pair, agents in jobs:
            sides = ["labcore", pair.peer] if round_ % 2 == 0 else [pair.peer, "labcore"]
            for side in sides:
                spec = spec_of(pair, side, agents, scheduler, variants)
                key = side_key(round_, spec)
                if key in done:
                    entry = done[key]
                    result, elapsed, date, how = entry["result"], entry["elapsed_s"], entry["date"], "recorded before"
                else:
                    started = time.perf_counter()
                    result = run_side(pythons[side], spec, timeout_s)
                    elapsed, date, how = time.perf_counter() - started, time.strftime("%Y-%m-%d"), "ran"
                    with sides_file.open("a") as out:
                        out.write(json.dumps({"key": key, "round": round_, "pair": pair.name, "agents": agents,
                                              "side": side, "elapsed_s": elapsed, "date": date, "result": result}) + "\n")
                seconds += elapsed
                dates.append(date)
                results.setdefault((pair.name, agents), {}).setdefault(side, []).append(result)
                print(f"round {round_ + 1}: {pair.name} x{agents} {side}: {result['steps_per_s']:,.0f} steps/s, "
                      f"return {result['return_mean']:.1f} ({elapsed:.0f} s, {how})", flush=True)
    return [row_of(pair, agents, results[(pair.name, agents)]) for pair, agents in jobs], seconds, [min(dates), max(dates)]


def _span(values: list[float], digits: int = 0) -> str:
    low, high = min(values), max(values)
    return f"{low:,.{digits}f}" if round(low, digits) == round(high, digits) else f"{low:,.{digits}f}-{high:,.{digits}f}"


def row_of(pair: Pair, agents: int, sides: dict[str, list[dict]]) -> dict:
    ours, theirs = sides["labcore"], sides[pair.peer]
    ratios = [a["steps_per_s"] / b["steps_per_s"] for a, b in zip(ours, theirs)]
    # end to end: compiles included on both sides (a host-driven side's rate includes them already)
    whole = lambda run: run["steps"] / (run["run_s"] + (run["compile_s"] or 0.0))  # noqa: E731
    end_to_end = [whole(a) / whole(b) for a, b in zip(ours, theirs)]
    compile_of = lambda runs: "in the run" if runs[0]["compile_s"] is None else _span([r["compile_s"] for r in runs], 1)  # noqa: E731
    return {
        "pair": pair.name, "peer": pair.peer, "env": pair.env, "agents": agents,
        "labcore steps/s": _span([r["steps_per_s"] for r in ours]), "peer steps/s": _span([r["steps_per_s"] for r in theirs]),
        "labcore / peer": f"{statistics.median(ratios):.2f}x ({_span(ratios, 2)})",
        "end to end": f"{statistics.median(end_to_end):.2f}x ({_span(end_to_end, 2)})",
        "labcore compile (s)": compile_of(ours), "peer compile (s)": compile_of(theirs),
        "labcore return": _span([r["return_mean"] for r in ours], 1), "peer return": _span([r["return_mean"] for r in theirs], 1),
        "ratios": ratios, "end_to_end_ratios": end_to_end, "runs": {"labcore": ours, pair.peer: theirs}, "source": pair.source,
        "unmatched": list(pair.unmatched), "steps": ours[0]["steps"],
    }


COLUMNS = ["pair", "agents", "labcore steps/s", "peer steps/s", "labcore / peer", "end to end", "labcore compile (s)",
           "peer compile (s)", "labcore return", "peer return"]


PAGE_START, PAGE_END = "<!-- peers.py: from here the page is written by benchmarks/peers.py -->", "<!-- peers.py: to here -->"


def page_section(record: dict) -> str:
    """The results page's measured part: what produced it, the table, and what each pair compared."""
    from labcore.tools.benchmarking import markdown_table

    machine = record["machine"]
    label = machine.get("label") or f"{machine['processor']}, {machine['cpu_count']} CPU cores"
    first, last = record.get("measured") or [record["time"][:10]] * 2
    lines = [f"`{record['command']}` on {label}, Python {machine['python']}, JAX {machine['jax']}, "
             f"{first if first == last else f'{first} to {last}'} ({record['rounds']} rounds, the two sides' order "
             f"swapped each round; the sides' processes took {record['wall_s'] / 60:.0f} min in all). Ranges are over "
             "the rounds; a ratio above 1 is labcore faster.",
             "", markdown_table(record["rows"], COLUMNS), "", "What each pair ran, and what could not be made the same:", ""]
    for row in record["rows"]:
        if row["agents"] != min(r["agents"] for r in record["rows"] if r["pair"] == row["pair"]):
            continue
        lines.append(f"- **{row['pair']}** ({row['env']}, {row['steps'] // max(1, row['agents']):,} env steps per agent): "
                     f"{row['source']}. " + " ".join(f"{item[0].upper()}{item[1:]}." for item in row["unmatched"]))
    lines += ["", "Not paired: " + " ".join(record["unmatched_algorithms"]) + ".", "",
              "Peers' environments: " + "; ".join(f"{name}: `{' '.join(pins)}`" for name, pins in record["peers"].items())
              + "."]
    return "\n".join(lines)


def write_page(record: dict, page: pathlib.Path) -> None:
    text = page.read_text()
    start, end = text.index(PAGE_START) + len(PAGE_START), text.index(PAGE_END)
    page.write_text(text[:start] + "\n\n" + page_section(record) + "\n\n" + text[end:])


def _field_value(item: str) -> tuple[str, Any]:
    """"mask_actions=false" -> ("mask_actions", False): the value read as JSON, else kept as a string."""
    field, _, text = item.partition("=")
    try:
        return field, json.loads(text)
    except json.JSONDecodeError:
        return field, text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("setup", help="build the peers' environments")
    make.add_argument("names", nargs="*", help="peers to set up (default: all)")
    timed = sub.add_parser("run", help="time the pairs")
    timed.add_argument("--pairs", nargs="+", choices=[pair.name for pair in PAIRS], help="default: every pair")
    timed.add_argument("--rounds", type=int, default=2)
    timed.add_argument("--agents", type=int, nargs="+", help="only these vmapped agent counts (default: each pair's)")
    timed.add_argument("--scale", type=float, default=1.0, help="multiply every step count (a tiny budget: 0.02)")
    timed.add_argument("--timeout", type=float, default=1800.0, help="seconds one side may take")
    timed.add_argument("--out", default=str(HERE / "results"), help="folder for peers.json")
    timed.add_argument("--resume", action="store_true", help=f"go on from the sides already in --out's {SIDES_NAME} "
                       "(the same pairs, rounds and budget), running only those still missing")
    timed.add_argument("--labcore", nargs="+", default=[], metavar="FIELD=VALUE", help="set these fields of labcore's "
                       "config in every pair run (a JSON value: mask_actions=false), to time what a feature costs")
    timed.add_argument("--labcore-variant", nargs="+", default=[], choices=sorted(LABCORE_VARIANTS), help="change "
                       "labcore's PPO or PQN in its process only, to time a difference no field switches: " +
                       "; ".join(f"{name}: {what}" for name, what in LABCORE_VARIANTS.items()))
    timed.add_argument("--scheduler", choices=SCHEDULERS, default="off", help="XLA's CPU scheduler on both sides: the "
                       "concurrency-optimised one off (default), or XLA's default")
    timed.add_argument("--page", type=pathlib.Path, help="also write the results page's measured part "
                       "(between its peers.py markers)")
    shown = sub.add_parser("page", help="write the results page's measured part from a peers.json")
    shown.add_argument("record", type=pathlib.Path)
    shown.add_argument("page", type=pathlib.Path)
    args = parser.parse_args(argv)
    if args.command == "page":
        write_page(json.loads(args.record.read_text()), args.page)
        return
    if args.command == "setup":
        for name, peer in peers().items():
            if not args.names or name in args.names:
                print(f"{name}: {setup(peer, quiet=False)}")
        return
    overrides = dict(_field_value(item) for item in args.labcore)
    chosen = [pair.scaled(args.scale) for pair in PAIRS if not args.pairs or pair.name in args.pairs]
    chosen = [dataclasses.replace(pair, labcore={**pair.labcore, **overrides}) for pair in chosen]
    if args.labcore_variant and any(pair.algorithm not in ("ppo", "pqn") for pair in chosen):
        parser.error("--labcore-variant changes labcore's PPO and PQN: choose their pairs only (--pairs)")
    rows, seconds, dates = run(chosen, args.rounds, args.agents, args.timeout, pathlib.Path(args.out) / SIDES_NAME, args.resume,
                               args.scheduler, tuple(args.labcore_variant))
    from labcore.tools.benchmarking import write_results

    given = [arg for arg in (argv if argv is not None else sys.argv[1:]) if arg != "--resume"]
    path = write_results("peers", rows, out_dir=args.out, columns=COLUMNS, extra={
        "command": " ".join(["python benchmarks/peers.py", *given]),
        "rounds": args.rounds, "scale": args.scale, "wall_s": seconds, "measured": dates, "xla_scheduler": args.scheduler,
        "labcore_overrides": overrides, "labcore_variants": args.labcore_variant,
        "peers": {name: list(peer.requirements) for name, peer in peers().items()},
        "unmatched_algorithms": list(UNMATCHED_ALGORITHMS)})
    if args.page is not None:
        write_page(json.loads(path.read_text()), args.page)


if __name__ == "__main__":
    main()
