"""Lesson 02's quiz: nnx.split and nnx.merge, the cost of nnx.jit, random state in NNX and Linen, and where to
merge in a loss."""

from labcore.course.exercises.quizzing import Choice, Question, Quiz

QUIZ = Quiz(
    lesson="02",
    title="Flax NNX",
    questions=(
        Question(
            "graphdef, state = nnx.split(model). What are the two parts, and what does nnx.merge(graphdef, state) "
            "do?",
            (
                Choice("graphdef holds the trainable parameters and state the other buffers, as PyTorch's "
                       "named_parameters() and named_buffers().",
                       "graphdef holds no arrays at all. Every variable, trainable or not, is in state; to "
                       "separate parameters from the rest, pass filters: nnx.split(model, nnx.Param, ...)."),
                Choice("graphdef is the module's structure (classes, attribute names, static fields; hashable, no "
                       "arrays) and state a pytree of its variables; merge builds a module from the two.",
                       "That is what lets a pure function take the state as an ordinary pytree and rebuild the "
                       "module inside jax.jit: the merge happens once, while tracing, and the compiled program is "
                       "the module's arithmetic alone."),
                Choice("graphdef is the compiled XLA program of the forward pass and state its inputs; merge runs "
                       "the program.",
                       "Nothing is compiled by split: graphdef is a plain Python description of the module, and "
                       "XLA only comes in when a function using it is jitted and called."),
            ),
            answer="b",
        ),
        Question(
            "A small train step, called from a Python loop once per environment step, takes measurably longer per "
            "call written with @nnx.jit (taking the model and the optimizer) than written as jax.jit over the "
            "state from nnx.split. Why?",
            (
                Choice("nnx.jit compiles a slower XLA program, because the module's Python objects end up inside "
                       "it.",
                       "Both compile the same arithmetic; the difference is paid in Python, around the compiled "
                       "call."),
                Choice("nnx.jit recompiles at every call, because the model changes in place.",
                       "The graph's structure does not change between calls, so the compiled program is reused; "
                       "the extra time is paid at every call without any compile."),
                Choice("At every call nnx.jit walks the graph of the objects it is given to take their state out, "
                       "and again to write the new state back; split + jax.jit walks once, outside the loop.",
                       "The compiled program is the same; the graph walk is Python work around each call, noise "
                       "next to a large step but a real cost for a small network called per env step. Inside one "
                       "jitted lax.scan the walk happens once, at trace time: labcore passes pytrees."),
                Choice("nnx.jit copies the parameters from the host to the device at every call.",
                       "The arrays stay on the device either way; what nnx.jit adds per call is bookkeeping in "
                       "Python, not data transfers."),
            ),
            answer="c",
        ),
        Question(
            "A module holds an nnx.Dropout built from nnx.Rngs(dropout=1). You call it through f = jax.jit(lambda "
            "state, x: nnx.merge(graphdef, state)(x)), passing the same state every time. What happens?",
            (
                Choice("Each call draws a new mask from JAX's global random generator, as torch.nn.Dropout does.",
                       "JAX has no global random generator: every draw comes from an explicit key, here the one "
                       "held in the module."),
                Choice("An error: random draws are not allowed under jax.jit.",
                       "Random draws compile like any other operation: a key is just an array."),
                Choice("Each call draws a new mask, because nnx.Rngs reseeds itself whenever the module is merged.",
                       "nnx.Rngs never reseeds: the same key and counter always give the same draws."),
                Choice("Every call uses the same mask: the stream's key and counter live in state, and the advanced "
                       "counter is lost unless f returns the new state and the caller passes it on.",
                       "nnx.split puts the dropout stream's RngKey and RngCount into state. Return "
                       "nnx.state(module) from f and carry it, or let nnx.jit write it back. A Linen module keeps "
                       "no random state: you pass a fresh key at every call, apply(..., rngs={\"dropout\": key})."),
            ),
            answer="d",
        ),
        Question(
            "Training over nnx.split state in a lax.scan, you write loss_fn(params) = mse(model(xs), ys), where "
            "model is the module built outside the function, and take jax.grad(loss_fn)(params). What happens?",
            (
                Choice("The gradient is all zeros: loss_fn never uses params. Merge inside the loss: "
                       "mse(nnx.merge(graphdef, params)(xs), ys).",
                       "JAX differentiates a function with respect to its arguments, and this loss does not "
                       "depend on its argument: model's arrays enter as constants. Nothing raises, and nothing "
                       "trains; merging from params inside the loss routes the gradient to the parameters."),
                Choice("It trains as expected: the model reads its parameters from the state that jax.grad is "
                       "tracking.",
                       "That is PyTorch's autograd, which follows tensors wherever they are used. jax.grad only "
                       "sees how the output depends on the arguments it is given."),
                Choice("It raises an UnexpectedTracerError, because model was built outside the scan.",
                       "Arrays built outside a traced function are captured as constants, which is allowed; no "
                       "tracer escapes, so nothing warns you."),
            ),
            answer="a",
        ),
    ),
)
