"""Lesson 03's quiz: what jit traces, what lax.scan carries, and vmap over whole training runs."""

from labcore.course.exercises.quizzing import Choice, Question, Quiz

QUIZ = Quiz(
    lesson="03",
    title="jit, scan and vmap",
    questions=(
        Question(
            "f = jax.jit(g). You call f(jnp.ones(4)), f(jnp.zeros(4)), f(jnp.ones(8)), then "
            "f(jnp.ones(8, dtype=jnp.int32)). How many times does JAX trace g?",
            (
                Choice("Once: jit compiles a function once.",
                       "jit compiles once per input signature: a new shape or dtype (or a new value of a static "
                       "argument) means a new trace and a new compile."),
                Choice("Four times: once per call.",
                       "A call with the shapes and dtypes of an earlier one reuses its compiled program without "
                       "running Python; the values (ones or zeros) do not matter."),
                Choice("Three times: for float32[4], float32[8] and int32[8].",
                       "Tracing sees only shapes and dtypes, so the second call reuses the first program; the "
                       "third changes the shape, the fourth the dtype. In a training loop a trace count that "
                       "keeps growing is a bug, such as a batch whose size varies."),
                Choice("Twice: once per shape.",
                       "The dtype is part of the signature too, as the shape is."),
            ),
            answer="c",
        ),
        Question(
            "A lax.scan body draws its exploration coin with jax.random.uniform(key), where key is a variable "
            "defined before the scan and never split. What happens over 1,000 steps?",
            (
                Choice("Each step gets a fresh number: scan advances the key.",
                       "JAX has no hidden generator state: a key is an ordinary value, and nothing advances it "
                       "unless you split it."),
                Choice("An error: a scan body may not use arrays defined outside it.",
                       "A body may close over arrays defined outside it; nothing is raised."),
                Choice("Fresh numbers, because the Python body runs once per iteration.",
                       "The body is traced once, into a compiled loop: Python does not run again at each "
                       "iteration."),
                Choice("The same coin at every step: the key is a constant of the compiled loop.",
                       "A closed-over key is fixed at trace time. Whatever must change from step to step, the "
                       "PRNG key included, belongs in the carry: labcore's env_step splits carry.key every step "
                       "and carries the new key on."),
            ),
            answer="d",
        ),
        Question(
            "Your scan body appends each new transition to the replay buffer with jnp.concatenate, so the buffer "
            "it returns in the carry is one row longer than the buffer it received. What happens?",
            (
                Choice("It works, but every step reallocates the buffer.",
                       "It does not get that far: the body is compiled once, as one loop, before any step runs."),
                Choice("A TypeError while the scan is traced: the carry's output type must equal its input type.",
                       "A compiled loop needs a state of fixed size. That is why labcore's replay buffer is "
                       "arrays of capacity rows with a write position and a size, and add writes into them."),
                Choice("It works: the carry grows as a Python list would.",
                       "Inside the loop the carry is not a Python object but the fixed-shape state of one XLA "
                       "while loop."),
                Choice("It works under vmap, but not under jit.",
                       "vmap adds a batch axis to the loop; it does not change what a loop's state may be."),
            ),
            answer="b",
        ),
        Question(
            "Inside the scan body you write `if carry.step > learning_starts:` to skip updates during the "
            "warm-up. What happens?",
            (
                Choice("A TracerBoolConversionError: carry.step has no value while the body is traced.",
                       "A traced array has a shape and a dtype but no value, so Python cannot branch on it. A "
                       "condition decided at run time needs jnp.where or lax.cond; labcore knows the warm-up "
                       "length in advance, so it passes a Python bool (learn) and runs two scans."),
                Choice("It works: the condition is checked at every iteration.",
                       "Python never sees the iterations: it runs the body once, while tracing, on values that "
                       "are not numbers yet."),
                Choice("It works, but the branch is chosen once at trace time and kept for the whole run.",
                       "That is what happens with a Python value known at trace time, such as labcore's learn "
                       "flag; carry.step is not one."),
                Choice("It works as long as the function is not jitted.",
                       "lax.scan traces its body even outside jit, so dropping jit changes nothing here."),
            ),
            answer="a",
        ),
        Question(
            "train(key) is labcore's whole jitted DQN run. What does jax.jit(jax.vmap(train))(jax.random.split(key, "
            "8)) compute?",
            (
                Choice("One agent trained on 8 times as much data.",
                       "Nothing is shared between the mapped runs: each has its own parameters, buffer and envs, "
                       "and no gradient crosses the seed axis."),
                Choice("The same agent 8 times, because vmap shares the parameters.",
                       "The parameters are created inside train from its key, so each key gives its own initial "
                       "parameters, exploration and env resets."),
                Choice("8 agents whose gradients are averaged at every update.",
                       "That is data parallelism, a pmean over a named axis (lesson 04); vmap over train adds no "
                       "collective."),
                Choice("8 independent training runs, one per key, in one compiled program.",
                       "train is a pure function of its key, so vmap adds a leading seed axis to everything it "
                       "computes: 8 agents, each equal (to float rounding) to the run of its key alone."),
            ),
            answer="d",
        ),
    ),
)
