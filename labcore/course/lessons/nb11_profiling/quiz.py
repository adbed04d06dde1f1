"""Lesson 11's quiz: reading a profile, asynchronous dispatch, compile against run time, a curve in TensorBoard."""

from labcore.course.exercises.quizzing import Choice, Question, Quiz

QUIZ = Quiz(
    lesson="11",
    title="Profiling JAX RL, and its metrics in TensorBoard",
    questions=(
        Question(
            "On a CPU, you profile a fully jitted DQN run (one lax.scan). In the device-side table, sorted by "
            "inclusive time, the top operation is a while, taking almost all of the run. What does it tell you?",
            (
                Choice("The program is stuck in a Python while loop; rewrite it with lax.scan.",
                       "A Python loop is unrolled while JAX traces and never appears as one device operation; "
                       "this while is XLA's."),
                Choice("The device is idle, waiting for the host in a loop.",
                       "Waiting shows up on the host side of the trace; a fully jitted run keeps the device busy, "
                       "and its host side is little more than one dispatch and a wait."),
                Choice("The scan is that while: XLA compiles lax.scan to a while loop, which contains everything "
                       "else. Sort by self time to see the operations that do the work.",
                       "Inclusive time counts the events nested inside an operation, so the loop that contains the "
                       "whole run tops the table; self time ranks the fusions and the dots of the Q-network, "
                       "the operations doing the arithmetic."),
            ),
            answer="c",
        ),
        Question(
            "You time a jitted update with start = time.perf_counter(); out = update(state, batch); "
            "elapsed = time.perf_counter() - start, after a warm-up call. On a GPU elapsed is 0.05 ms, whatever "
            "the batch size. What did you measure?",
            (
                Choice("The update: the GPU is that fast for every batch size up to its memory.",
                       "A time that does not grow with the work is a sign that the work was not in it."),
                Choice("The dispatch: a jitted call returns as soon as its work is queued. Wait for the result "
                       "(jax.block_until_ready(out)) before reading the clock.",
                       "JAX dispatches asynchronously, as PyTorch does on CUDA (hence torch.cuda.synchronize()). "
                       "Converting the result to NumPy, float() or print waits too, which is why a print in a "
                       "training loop is a synchronisation point."),
                Choice("The compile: the warm-up call did not compile it.",
                       "The warm-up call compiled it; compiling takes far longer than 0.05 ms."),
                Choice("The time to copy the batch to the GPU.",
                       "The batch was an argument already on the device or copied during dispatch; the 0.05 ms is "
                       "the call returning before anything ran."),
            ),
            answer="b",
        ),
        Question(
            "Compiling a DQN update takes 1 s and running it 1 ms. A notebook cell builds the update and runs it "
            "200 times, and you run the notebook in a new kernel every day. Where does the time go, and what "
            "helps?",
            (
                Choice("Into the 200 runs; compiling is paid once per process and does not matter.",
                       "200 runs take 0.2 s; the compile, paid again in every new kernel, takes five times that."),
                Choice("Into the compile, paid in every new process: JAX's persistent compilation cache "
                       "(compile_cache.configure()) writes the program to disk, and the next process reads it "
                       "back instead of compiling.",
                       "Within one process jit's in-memory cache already reuses the program; across processes "
                       "only the on-disk cache does. The results do not change: a cached program is the program "
                       "XLA would compile."),
                Choice("Into the compile; writing the loop in Python instead of jit avoids it.",
                       "Run op by op, each of the 200 updates dispatches dozens of operations from Python: far "
                       "slower than one compile and 200 compiled runs."),
                Choice("Into the runs; donate_argnums makes them faster.",
                       "Donation saves memory by reusing input buffers; the time here is the compile."),
            ),
            answer="b",
        ),
        Question(
            "A PPO run logs episode_return by update; updates in which no episode ended log None. You plot "
            "the metrics.jsonl rows with the row index on the x axis and None as 0. What is wrong with the "
            "curve?",
            (
                Choice("Nothing: a missing return is a return of 0.",
                       "No episode ending is not a score of 0: the curve dives to zero between episodes."),
                Choice("Two things: it drops to 0 wherever no episode ended, and its x axis counts rows, not the "
                       "run's updates, so it is squeezed wherever rows were logged further apart.",
                       "Keep only the rows with a value and plot them at the run's own step, as TensorBoard "
                       "does: read_tensorboard_scalars returns exactly those (step, value) pairs."),
                Choice("Only the x axis: TensorBoard would plot None as 0 too.",
                       "TensorBoard gets no scalar for that update and draws no point there."),
                Choice("Only the zeros: the row index and the update are the same thing.",
                       "They are the same only when every update is logged; with log_every=5 they differ by a "
                       "factor of 5, and a resumed run's rows start past 0."),
            ),
            answer="b",
        ),
    ),
)
