"""Lesson 10's quiz: print under jit, a NaN log-probability, a silent recompile."""

from labcore.course.exercises.quizzing import Choice, Question, Quiz

QUIZ = Quiz(
    lesson="10",
    title="Debugging JAX",
    questions=(
        Question(
            "Inside a function decorated with jax.jit you write print(loss), then call the function three times "
            "with arrays of the same shape. What is printed?",
            (
                Choice("The loss's value, three times, as eager PyTorch would print it.",
                       "The Python body of a jitted function runs only while JAX traces it; the calls that reuse "
                       "the compiled program never run that print."),
                Choice("A tracer such as JitTracer(float32[]), once. jax.debug.print(\"loss {}\", loss) prints "
                       "the value at every call.",
                       "JAX runs your Python once, with tracers that carry a shape and a dtype but no value, to "
                       "build the program; later calls with the same shapes run the compiled program. "
                       "jax.debug.print is compiled into the program, so it prints the runtime value each call."),
                Choice("Nothing: print inside jit raises an error.",
                       "print is allowed; it just runs at trace time, on whatever it is given."),
                Choice("The value once, on the first call; write print(float(loss)) to see it at every call.",
                       "float() needs a concrete value, and a tracer has none: it raises a "
                       "ConcretizationTypeError."),
            ),
            answer="b",
        ),
        Question(
            "A policy loss computes jnp.log(jax.nn.softmax(logits)). Some logits are far below their row's "
            "largest (a masked action at -1e9, or just a very unlikely one), and the gradient turns to NaN. What "
            "is the cause, and the fix?",
            (
                Choice("softmax underflows to exactly 0 and log(0) = -inf; the gradient then multiplies 1/0 by 0, "
                       "which is NaN. Use jax.nn.log_softmax(logits).",
                       "In float32, exp underflows to 0 once a logit is about 104 below its row's largest. "
                       "log_softmax computes logits - logsumexp(logits), which stays finite (about -1e9 for a "
                       "masked action), and so does its gradient."),
                Choice("Add 1e-8 inside the log: jnp.log(probs + 1e-8).",
                       "It removes the -inf but floors every log-probability near -18.4 and bends the gradients "
                       "near 0: a wrong loss that no longer shows NaN."),
                Choice("The learning rate is too high and the parameters diverged; lower it.",
                       "The parameters here are finite: one bad operation makes the NaN. jax_debug_nans or "
                       "checkify's float_checks would name the operation where it is born."),
                Choice("float32 is too narrow for log-probabilities; enable float64 with jax_enable_x64.",
                       "exp(-1e9) is 0 in float64 too, and for a large enough gap any precision underflows; the "
                       "problem is taking the log of an underflowed probability."),
            ),
            answer="a",
        ),
        Question(
            "act(q, key, epsilon) is jitted with static_argnames=\"epsilon\" and called with an epsilon that decays "
            "at every step. It returns the right actions, but every call is slow. Why?",
            (
                Choice("jax.random is slow under jit; draw the coin with NumPy on the host.",
                       "Drawing inside the compiled program is cheap; and moving it to the host adds a transfer "
                       "at every step."),
                Choice("A Python float epsilon forces a copy to the device at every call; pass "
                       "jax.device_put(epsilon) instead.",
                       "Copying one scalar is cheap, and a static argument is never copied at all: it is part of "
                       "the program."),
                Choice("The key is reused between calls, and JAX rebuilds its random state each time.",
                       "JAX has no random state to rebuild: a key is an ordinary array argument, whatever its "
                       "value."),
                Choice("Each new value of a static argument is a new program: JAX traces and compiles act again at "
                       "every step. Pass epsilon as an ordinary traced argument.",
                       "A static argument is part of the program, so every new epsilon misses the cache; "
                       "jax.log_compiles() and jax_explain_cache_misses show it. Traced, one program serves "
                       "every epsilon; keep static arguments for sizes and structure."),
            ),
            answer="d",
        ),
    ),
)
