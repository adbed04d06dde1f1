"""Lesson 08's quiz: bfloat16 against float16, the default matmul precision, timing a jitted call, GPU memory."""

from labcore.course.exercises.quizzing import Choice, Question, Quiz

QUIZ = Quiz(
    lesson="08",
    title="GPUs, TPUs and precision",
    questions=(
        Question(
            "bfloat16 and float16 both take 16 bits. Compared with float16, what does bfloat16 keep from float32, "
            "and what does it give up?",
            (
                Choice("It keeps float32's precision and gives up range.",
                       "It is the other way round: bfloat16 has 8 significant bits (7 stored), fewer than "
                       "float16's 11, so it is the less precise of the two."),
                Choice("It keeps float32's range (the same 8 exponent bits) and gives up precision: 8 significant "
                       "bits, against float16's 11.",
                       "Its largest value is float32's (about 3.4e38) and tiny gradients do not underflow, which is "
                       "why bfloat16 training rarely needs the loss scaling that float16 (largest value 65504) "
                       "does; the price is a relative rounding error of up to 2**-8, about 0.4%."),
                Choice("Nothing: it is the same format under another name.",
                       "The two split their 16 bits differently: float16 has 5 exponent bits and 10 stored "
                       "mantissa bits, bfloat16 has 8 and 7."),
            ),
            answer="b",
        ),
        Question(
            "A JAX port of a PyTorch network matches the original to 1e-6 on a CPU. On a TPU, or an A100 GPU, the "
            "same float32 comparison fails at 1e-5. What is the likely cause?",
            (
                Choice("A bug that the CPU hid: XLA runs the same float32 program exactly on every device.",
                       "The program is the same, but the arithmetic of its matmuls is not: a default float32 "
                       "matmul is not computed in full float32 on every device."),
                Choice("The arrays were silently cast to bfloat16 when they were moved to the device; cast them "
                       "back with .astype(jnp.float32) before the matmul.",
                       "The arrays stay float32 in memory, and casting them changes nothing: the rounding happens "
                       "inside the matmul, and a setting, not a dtype, controls it."),
                Choice("By default JAX lets a float32 matmul round its inputs: to bfloat16 on a TPU, to TF32 on "
                       "Ampere or newer GPUs. Compare under jax.default_matmul_precision(\"highest\").",
                       "JAX leans towards speed: TPUs multiply bfloat16 inputs (8 significant bits) and Ampere "
                       "tensor cores TF32 inputs (11 bits), both summed in float32. Full float32 costs several "
                       "times as much on a TPU, so set it for parity checks, not for training."),
                Choice("TPUs and these GPUs have no float32 arithmetic, so a 1e-5 comparison cannot pass there.",
                       "Both can compute a float32 matmul in full precision (a TPU in several bfloat16 passes); "
                       "they just do not do it by default."),
            ),
            answer="c",
        ),
        Question(
            "You time a freshly jitted update once: t0 = time.perf_counter(); out = update(state, batch); "
            "dt = time.perf_counter() - t0. What does dt measure, and how should the update be timed?",
            (
                Choice("The update's run time: jax.jit compiled the function when it was decorated, and the call "
                       "returns when out is ready.",
                       "jax.jit compiles lazily, on the first call for each new combination of shapes, dtypes and "
                       "static arguments; and a jitted call returns once its work is queued, not when it is done."),
                Choice("The run time plus a little Python overhead: average 100 such calls, the first included, "
                       "and the compile averages away.",
                       "One compile can cost as much as thousands of small updates, so it dominates an average of "
                       "100; and the later calls, never waited for, measure how fast work is queued."),
                Choice("The compile alone: JAX only builds the program on this call, and runs it when you first "
                       "read out.",
                       "JAX is not lazy in that way: the compiled program is dispatched right away and runs while "
                       "Python goes on; reading out only waits for it to finish."),
                Choice("Mostly tracing and compiling. Call it once untimed, then time repeated calls, each waited "
                       "for with jax.block_until_ready, and report the median.",
                       "The first call for these shapes traces and compiles; later calls reuse the program but "
                       "return before the device is done (asynchronous dispatch), so a timer must wait for the "
                       "result, as torch.cuda.synchronize() does for PyTorch on a GPU."),
            ),
            answer="d",
        ),
        Question(
            "On a 16 GB GPU, nvidia-smi shows about 12 GB in use as soon as your script has created one small JAX "
            "array. What is going on?",
            (
                Choice("JAX reserves 75% of the GPU's memory when its first operation runs and serves every array "
                       "from that pool.",
                       "It is not a leak. XLA_PYTHON_CLIENT_PREALLOCATE=false (allocate on demand) or "
                       "XLA_PYTHON_CLIENT_MEM_FRACTION changes it, if set before JAX starts; to size a program, "
                       "ask XLA with compiled.memory_analysis() instead."),
                Choice("A memory leak: every array stays on the GPU until the process exits.",
                       "Arrays are freed when nothing refers to them any more; the 12 GB were taken before your "
                       "arrays needed any of it."),
                Choice("The same as PyTorch's caching allocator: your arrays asked for 12 GB, and the freed blocks "
                       "are kept for reuse.",
                       "PyTorch's cache grows with what tensors have asked for; this figure appears after one small "
                       "array, so it is not what your arrays requested."),
                Choice("The compiled programs: each jitted function keeps its XLA executable in GPU memory.",
                       "An executable takes little memory, and no function has been jitted yet in this script."),
            ),
            answer="a",
        ),
    ),
)
