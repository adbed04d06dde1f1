"""DQN's four records the registry lists (``labcore.agents.contract.Algorithm``), one per driver: imports no JAX;
each driver is imported when its record is used."""

from __future__ import annotations

from labcore.agents.contract import Algorithm, settings_of
from labcore.agents.dqn.config import (ACTOR_LEARNER_NAME, DATA_PARALLEL_NAME, HOST_LOOP_NAME, SCAN_NAME,
                                       ActorLearnerSettings, DataParallelSettings, DQNConfig, HostLoopSettings)


# The four ways labcore runs DQN, one registry name each. Each record imports its driver when called.

def _scan():
    from labcore.agents.dqn import scan

    return scan


def _host_loop():
    from labcore.agents.dqn import host_loop

    return host_loop


def _multi_process():
    from labcore.agents.dqn import multi_process

    return multi_process


def _actor_learner():
    from labcore.agents.dqn import actor_learner

    return actor_learner


ONE_RUN = "runs one seed per call; run it once per seed"
HOST_ROWS = "logs its rows itself; read them from the result or the run folder"
EVAL_FIELDS = {"episodes": "eval_episodes", "epsilon": "eval_epsilon"}
SMALLEST_RUN = {"checkpoint_every": 60}  # half of smallest()'s 1,200 steps / train_frequency 10

SCAN = Algorithm(
    SCAN_NAME, "DQN on a gymnax env, all of training one jitted program (labcore.agents.dqn.train)", DQNConfig, _scan,
    presets=("minatar",), eval_fields=EVAL_FIELDS, smallest_run=SMALLEST_RUN)
HOST_LOOP = Algorithm(
    HOST_LOOP_NAME, "DQN on gymnasium envs stepped in Python: classic control, or Atari through ale-py", DQNConfig,
    _host_loop, presets=("nature_atari", "atari_short"), settings=settings_of(HostLoopSettings),
    refuses={"seeds": ONE_RUN, "on_metrics": HOST_ROWS}, eval_fields=EVAL_FIELDS, synchronous_dispatch=True,
    smallest_run=SMALLEST_RUN)
DATA_PARALLEL = Algorithm(
    DATA_PARALLEL_NAME, "DQN over every device of this process, or of every process `launch` starts "
                       "(gradients averaged, parameters identical everywhere)", DQNConfig, _multi_process,
    presets=("minatar",), settings=settings_of(DataParallelSettings),
    refuses={"seeds": "runs one seed: its replicas already fill the devices"}, eval_fields=EVAL_FIELDS,
    joins_cluster=True, smallest_run=SMALLEST_RUN)
ACTOR_LEARNER = Algorithm(
    ACTOR_LEARNER_NAME, "DQN with Ray actors feeding one learner: this machine, or a Ray cluster (--address)",
    DQNConfig, _actor_learner, settings=settings_of(ActorLearnerSettings),
    refuses={"seeds": ONE_RUN, "on_metrics": HOST_ROWS}, eval_fields=EVAL_FIELDS,
    # one actor with short rollouts (seconds); its learner updates counted as the other DQN drivers' (half: 60)
    smallest_run={**SMALLEST_RUN, "num_actors": 1, "envs_per_actor": 4, "rollout_steps": 8}, repeatable=False)
