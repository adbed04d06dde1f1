"""Lesson 05's quiz: identical replicas across processes, a dead worker, global and local devices, Ray's actors."""

from labcore.course.exercises.quizzing import Choice, Question, Quiz

QUIZ = Quiz(
    lesson="05",
    title="Many processes and machines: jax.distributed and Ray",
    questions=(
        Question(
            "Two processes with two devices each have called jax.distributed.initialize(). What do jax.devices() "
            "and jax.local_devices() return in process 1?",
            (
                Choice("jax.devices(): its own 2 devices; jax.local_devices(): the same 2.",
                       "Before initialize that would be so. Afterwards jax.devices() is global."),
                Choice("jax.devices(): all 4 devices of both processes; jax.local_devices(): its own 2, the ones "
                       "it can feed and read.",
                       "A global mesh is built over jax.devices(); each process supplies the blocks of a global "
                       "array that live on its local devices (jax.make_array_from_process_local_data)."),
                Choice("jax.devices(): all 4; jax.local_devices(): all 4 as well, since the processes share "
                       "memory.",
                       "Processes share no memory: a process can put data only on its own devices, and values "
                       "cross processes only through collectives."),
                Choice("jax.devices(): process 0's devices, since process 0 is the coordinator.",
                       "The coordinator only helps the processes meet; it does not own the other processes' "
                       "devices."),
            ),
            answer="b",
        ),
        Question(
            "In a two-process data-parallel run, worker 1 crashes while worker 0 is inside an all-reduce. What "
            "happens without a supervisor, and what does labcore.distributed.launch do?",
            (
                Choice("Worker 0 notices the missing peer, skips the all-reduce and trains alone.",
                       "A collective has no partial result: the all-reduce cannot finish without every "
                       "participant."),
                Choice("JAX restarts worker 1 and both carry on from the last step.",
                       "jax.distributed does not restart processes; resuming from a checkpoint is a new launch."),
                Choice("Without a supervisor worker 0 waits in the collective forever; launch watches every worker, "
                       "stops all the others when one exits with an error, and reports which one died.",
                       "A hang is the worst failure: nothing says what went wrong. The launcher also gives up when "
                       "the cluster does not form within join_timeout_s or the run exceeds timeout_s."),
                Choice("Worker 0 raises an exception at once, naming worker 1.",
                       "The survivor is blocked inside the collective, not failing; it learns nothing of the crash "
                       "by itself."),
            ),
            answer="c",
        ),
        Question(
            "In labcore's data-parallel DQN each device steps its own envs into its own replay buffer, and no "
            "parameters are sent between devices after the start. Why do all replicas still hold the same "
            "parameters?",
            (
                Choice("Every update ends with a broadcast of device 0's parameters.",
                       "Nothing like that happens: after the start, the only collective of an update is one "
                       "all-reduce."),
                Choice("They do not: each replica follows its own data, and the parameters are averaged for "
                       "evaluation.",
                       "The run compares a hash of the parameters across processes after every chunk and stops "
                       "if they differ: identical parameters are a requirement, checked, not an accident."),
                Choice("They start from the same key(seed), and every update applies the same averaged gradients "
                       "with the same optimiser; only the exploration keys, envs and buffers differ per device.",
                       "Identical parameters and an identical deterministic step give identical results, and the "
                       "target network is copied at the same update count everywhere. Device d explores with "
                       "fold_in(key(seed), d), so the experience differs while the parameters do not."),
                Choice("All devices sample their batches from one shared replay buffer.",
                       "Each device keeps its own buffer, filled by its own envs; a shared one would need every "
                       "batch to be moved between devices."),
            ),
            answer="c",
        ),
        Question(
            "labcore's Ray actor-learner lets actors act while the learner trains, with no barrier between them. "
            "What does it give up compared with the synchronous data-parallel DQN?",
            (
                Choice("Fresh parameters and reproducibility: actors act with parameters some updates old, and "
                       "which rollout arrives first depends on the operating system's scheduling.",
                       "In exchange the actors do not wait for the learner's updates. DQN learns off-policy: its "
                       "replay buffer already mixes data from many past policies. On-policy methods such as PPO "
                       "assume data from the current policy (IMPALA corrects for the lag with V-trace)."),
                Choice("Experience replay: the learner must train on each rollout once, as it arrives.",
                       "The learner owns the replay buffer: every rollout goes into it, and the updates sample "
                       "from it as usual."),
                Choice("Nothing: it computes the same updates as the synchronous version, only faster.",
                       "Look at which parameters the actors act with, and at what decides the order in which "
                       "rollouts reach the learner."),
                Choice("Gradient averaging: each actor computes gradients that the learner applies late.",
                       "Actors compute no gradients in this design: they act and return experience, and the "
                       "learner alone computes gradients, from its replay buffer."),
            ),
            answer="a",
        ),
    ),
)
