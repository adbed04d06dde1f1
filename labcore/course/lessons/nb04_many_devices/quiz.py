"""Lesson 04's quiz: pmean across devices, why gradients are averaged, jit over shardings, sync updates."""

from labcore.course.exercises.quizzing import Choice, Question, Quiz

QUIZ = Quiz(
    lesson="04",
    title="Many devices in one process: data-parallel DQN",
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
            "A jitted update takes parameters placed with NamedSharding(mesh, P()) (replicated) and a batch placed "
            "with NamedSharding(mesh, P('devices')) (split by rows), and computes the mean TD loss over the whole "
            "batch with no pmean written anywhere. What does each device apply?",
            (
                Choice("The gradient of its own rows only: without a pmean the replicas drift apart.",
                       "That is shard_map without a pmean, where you write the per-device program. Under jit you "
                       "write the program for the whole batch, and the compiler splits it."),
                Choice("The gradient of the whole batch's mean loss: the compiler sees a mean over rows that live "
                       "on different devices and inserts the all-reduce itself.",
                       "jit over sharded arrays computes what the program says on the global arrays; the "
                       "communication follows from the shardings. shard_map is the form where the pmean is yours "
                       "to write."),
                Choice("Nothing until the host gathers the gradients and sends them back.",
                       "No host round trip happens: the all-reduce is part of the compiled program, between the "
                       "devices."),
                Choice("Device 0 computes the whole update and the others copy its parameters.",
                       "Each device computes on its own rows; only the reduction crosses devices."),
            ),
            answer="b",
        ),
        Question(
            "Four devices run a synchronous data-parallel update. One of them takes 1.3 s for its gradient, the "
            "others 1.0 s. How long does the update take, and why?",
            (
                Choice("About 1.075 s, the mean of the four.",
                       "The devices do not share out the slow device's work; each waits for the others."),
                Choice("About 1.0 s: the three fast devices go ahead and the slow one catches up at the next step.",
                       "That is an asynchronous design. Here the optimiser step needs the averaged gradient, which "
                       "needs every device's contribution."),
                Choice("About 1.3 s: every device waits at the all-reduce for the slowest one, then all apply the "
                       "same step.",
                       "The price of synchronous updates: the step time is the slowest device's. In exchange the "
                       "replicas stay identical and the run is the single-device run, reproducibly."),
                Choice("About 0.325 s: the work is split four ways.",
                       "Splitting the batch is what makes each device's part 1.0 s or 1.3 s in the first place; "
                       "those times are per device."),
            ),
            answer="c",
        ),
    ),
)
