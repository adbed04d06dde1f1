"""Lesson 00's quiz: arrays, keys, grad and vmap."""

from labcore.course.exercises.quizzing import Choice, Question, Quiz

QUIZ = Quiz(
    lesson="00",
    title="JAX's primitives",
    questions=(
        Question(
            "You call jax.random.normal(key, (3,)) twice with the same key. What do you get?",
            (
                Choice("Two different vectors: each call advances the generator.",
                       "JAX has no hidden generator state to advance: a draw is a pure function of the key."),
                Choice("The same vector twice.",
                       "A draw is a pure function of its key, so the same key gives the same numbers; split the "
                       "key (jax.random.split) to get fresh ones."),
                Choice("An error: a key may be used only once.",
                       "Nothing stops the second call by default; JAX's key-reuse checker (jax.debug_key_reuse) "
                       "can be switched on to flag it, but the plain call just returns the same numbers."),
            ),
            answer="b",
        ),
        Question(
            "x is a JAX array. How do you get a copy of x with x[0] set to 5?",
            (
                Choice("x[0] = 5", "JAX arrays are immutable: item assignment raises a TypeError."),
                Choice("x.at[0].set(5)",
                       "It returns a new array with that entry changed and leaves x as it was; under jit XLA "
                       "can update in place when x is not needed afterwards."),
                Choice("np.asarray(x)[0] = 5",
                       "That writes into a NumPy array (a copy, or a read-only view of the device buffer), "
                       "not into a JAX array you can go on using."),
            ),
            answer="b",
        ),
        Question(
            "loss(params, x) returns a scalar and params is a dict of arrays. What does jax.grad(loss)(params, x) "
            "return?",
            (
                Choice("A dict with the same keys and shapes as params: d loss / d params.",
                       "grad differentiates with respect to the first argument, whatever pytree it is, and returns "
                       "a gradient with that argument's structure."),
                Choice("A tuple of gradients, one for params and one for x.",
                       "Only the first argument is differentiated unless argnums=(0, 1) asks for both."),
                Choice("The loss and its gradient.",
                       "That is jax.value_and_grad; jax.grad returns the gradient alone."),
            ),
            answer="a",
        ),
        Question(
            "f(u, v) takes two vectors. What does jax.vmap(f, in_axes=(0, None))(a, v) compute for a of shape [N, D]?",
            (
                Choice("f(a[i], v) for each row i, stacked along a new leading axis.",
                       "in_axes=0 maps over a's rows; None passes v whole to every call."),
                Choice("f(a, v) once, with a broadcast against v.",
                       "vmap calls the per-example function once per row (as if in a loop, but batched), it does "
                       "not hand it the whole array."),
                Choice("f(a[i], v[i]) for each i.",
                       "That would be in_axes=(0, 0); None means v is not mapped."),
            ),
            answer="a",
        ),
    ),
)
