"""Lesson 03's quiz: pmean across devices, why gradients are averaged, identical replicas, sync vs async."""

from labcore.course.exercises.quizzing import Choice, Question, Quiz

QUIZ = Quiz(
    lesson="03",
    title="Data-parallel and distributed DQN",
    questions=(
        Question(
            "Four devices each compute g_d, the mean gradient over their own 32 rows of a 128-row batch, then call "
            "lax.pmean(g, 'devices'). What does each device hold afterwards?",
            (
                Choice("Its own g_d: pmean only reports the mean to the host.",
                       "pmean is a collective inside the compiled program: its result replaces each device's "
                       "value."),
                Choice("g_0 + g_1 + g_2 + g_3, on every device.",
                       "That is psum; pmean divides the sum by the number of devices on the axis."),
                Choice("The mean on device 0 only; the other devices receive it by a broadcast afterwards.",
                       "That would be two steps, a reduce and then a broadcast; pmean is one collective."),
                Choice("(g_0 + g_1 + g_2 + g_3) / 4 on every device: the mean gradient over all 128 rows.",
                       "pmean is an all-reduce that averages over the named axis. With equal shards the mean of "
                       "the shard means is the whole batch's mean gradient, so every replica applies the update "
                       "one device would compute on the whole batch."),
            ),
            answer="d",
        ),
        Question(
            "Why does the data-parallel update average the gradients (pmean) rather than add them (psum)?",
            (
                Choice("Averaging keeps the replicas identical; with psum they would drift apart.",
                       "psum also leaves the same value on every device, so the replicas would stay identical; "
                       "what would change is the size of the gradient."),
                Choice("Each device's loss is a mean over its shard, so the average of the shard gradients is "
                       "exactly the gradient of the whole batch's mean loss, whatever the number of devices.",
                       "The update then equals one device's update on the whole batch. A sum is n times that: "
                       "with plain SGD it multiplies the learning rate by n, and even with Adam it changes what "
                       "gradient clipping and Adam's epsilon see, so results would depend on the device count."),
                Choice("pmean needs less communication than psum.",
                       "Both are the same all-reduce; pmean only divides the result by the axis size, locally."),
                Choice("Averaging reduces the gradient's variance; summing would not.",
                       "The sum and the mean point the same way and differ by the constant factor n; the noise "
                       "reduction comes from the larger batch in both cases."),
            ),
            answer="b",
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
                       "In exchange nobody waits for the slowest worker. DQN tolerates the staleness well because "
                       "it is off-policy and its replay buffer already mixes data from many past policies; "
                       "on-policy methods such as PPO do not."),
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
