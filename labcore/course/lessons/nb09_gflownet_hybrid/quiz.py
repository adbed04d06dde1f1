"""Lesson 09's quiz: what trajectory balance equates, the learned log Z, sampling in proportion to the reward,
and which step of the migration from PyTorch gained the most speed in the GFlowNet results."""

from labcore.course.exercises.quizzing import Choice, Question, Quiz

QUIZ = Quiz(
    lesson="09",
    title="GFlowNets, from PyTorch to JAX",
    questions=(
        Question(
            "For one complete trajectory s_0 -> s_1 -> ... -> x, trajectory balance drives the residual to zero. "
            "It asks that log Z + sum_t log P_F(s_{t+1}|s_t) equal what?",
            (
                Choice("log R(x) alone: the trajectory's forward log-probability, plus log Z, should match the "
                       "log-reward.",
                       "Many trajectories end at the same x. If each of them had probability R(x) / Z, x would be "
                       "sampled in proportion to R(x) times its number of paths; the backward policy's term is "
                       "what shares R(x) out among the paths."),
                Choice("The discounted return of the trajectory, as in Q-learning, so that the policy moves "
                       "towards the highest-reward x.",
                       "There are no per-step rewards and nothing is maximised here: the residual compares two "
                       "flows of one trajectory, and it is zero for low-reward trajectories too."),
                Choice("log R(x) + sum_t log P_B(s_t|s_{t+1}): the flow Z P_F(trajectory) equals the flow "
                       "R(x) P_B(trajectory | x).",
                       "When this holds for every trajectory, summing over the trajectories that end at x gives "
                       "P_F(x) = R(x) / Z: the forward policy ends at x in proportion to its reward. labcore's "
                       "exit step has log P_B = 0, and the loss is the batch mean of the squared residual."),
            ),
            answer="c",
        ),
        Question(
            "Once trajectory balance has converged on HyperGrid, what is exp(log Z), the learned scalar?",
            (
                Choice("The largest reward, max_x R(x): log Z tracks the best object found so far.",
                       "Z must make R(x) / Z a probability distribution over every terminal x, which the largest "
                       "reward alone cannot do."),
                Choice("The normaliser of P_F's softmax at the initial state.",
                       "Each state's softmax normalises itself; Z is a single number that belongs to no one "
                       "state's action probabilities."),
                Choice("The expected reward of the current policy, a baseline that lowers the variance of the "
                       "gradient, as in REINFORCE.",
                       "A baseline would change with the policy; log Z converges to a constant of the reward "
                       "function alone, whatever policy is sampled."),
                Choice("The partition function: the sum of R(x) over all terminal objects (22.4 on D=2, H=8).",
                       "The residual can be zero on every trajectory only when Z = sum_x R(x), the total flow out "
                       "of s_0, so log Z learns it (with its own, larger learning rate). On D=2, H=8 it is 4 x 2.6 "
                       "+ 12 x 0.6 + 48 x 0.1 = 22.4."),
            ),
            answer="d",
        ),
        Question(
            "On D=2, H=8, the 4 peaks have R = 2.6, the 12 plateau points R = 0.6 and the 48 floor points R = 0.1. "
            "A perfectly trained GFlowNet draws 10,000 objects. About how many land on the floor?",
            (
                Choice("Almost none: training concentrates the policy on the highest rewards, as a "
                       "reward-maximising policy would.",
                       "That is what maximising the expected reward leads to. A GFlowNet's target is a "
                       "distribution, and the floor has its share of it."),
                Choice("About 2,100: the floor holds 4.8 of the total reward of 22.4, and x is drawn with "
                       "probability R(x) / Z.",
                       "Each floor point is 26 times less likely than a peak, but there are 48 of them: "
                       "10,000 x 4.8 / 22.4 is about 2,140. Sampling in proportion to reward is what gives "
                       "diverse candidates rather than one best one."),
                Choice("About 7,500: 48 of the 64 points are floor points, and sampling keeps the distribution "
                       "close to uniform.",
                       "That would be a uniform distribution over the grid; the target weights every point by its "
                       "reward."),
                Choice("About 45: a floor point is 26 times less likely than a peak, so the floor gets only a "
                       "sliver.",
                       "About 45 is what one floor point gets (10,000 x 0.1 / 22.4); the question asks about all "
                       "of the floor's points together."),
            ),
            answer="b",
        ),
        Question(
            "The lesson migrates a PyTorch trainer in steps: hybrid (a jitted JAX gradient step), jax_policy (the "
            "policy in JAX, sampling still a Python loop), jax (everything in JAX). In the GFlowNet results (a 2-core "
            "CPU and an NVIDIA H200), which step gave the largest gain in speed end to end?",
            (
                Choice("The last step: the sampler becomes a lax.scan over the fixed maximum length, and the whole "
                       "run one compiled program.",
                       "It removes the Python loop, its many small jitted calls with their dispatch, and the "
                       "device-to-host read that asked whether every trajectory had exited. On both machines it "
                       "gave the largest gain end to end; how much each removed part cost was not measured apart."),
                Choice("The hybrid step: the gradient step is where JAX is fast, so replacing loss.backward() and "
                       "optimizer.step() gives most of the gain.",
                       "The jitted step is faster, but sampling is untouched and the conversion and the parameter "
                       "sync cost time of their own; end to end, this step changed little on the 2-core CPU and "
                       "was slower than the PyTorch trainer on the H200."),
                Choice("Writing the losses with fixed shapes and masks instead of Python lists.",
                       "PyTorch can run the same masked, batched loss (the PyTorch trainer does); the masks are "
                       "what make the loss jittable; the results' speed-ups come with the trainers' steps."),
                Choice("The jax_policy step: copying the parameters between the frameworks was most of the time.",
                       "The copies' share depended on the machine (about 2 of 24-29 ms on the 2-core CPU, 9.3 of "
                       "31.1 ms on the H200), and this step still calls a small jitted function per environment "
                       "step from Python: on the H200 it was slower end to end than the PyTorch trainer."),
            ),
            answer="a",
        ),
    ),
)
