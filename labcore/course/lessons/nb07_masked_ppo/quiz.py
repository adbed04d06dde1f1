"""Lesson 07's quiz: masking the logits, the mask in the update, the clipped objective, GAE, truncation."""

from labcore.course.exercises.quizzing import Choice, Question, Quiz

QUIZ = Quiz(
    lesson="07",
    title="Action-masked PPO",
    questions=(
        Question(
            "How does labcore apply the action mask to the policy's logits?",
            (
                Choice("It multiplies the logits by the mask, so illegal logits become 0.",
                       "A logit of 0 still has weight exp(0) = 1 in the softmax: illegal actions keep a "
                       "probability comparable to the legal ones."),
                Choice("It sets illegal logits to -inf.",
                       "The probabilities would be right, but an illegal action's p * log p is then 0 * -inf = NaN "
                       "in a plain entropy formula, and the NaN spreads to the gradient."),
                Choice("It replaces illegal logits with -1e9 (jnp.where) before the softmax.",
                       "exp(-1e9 - max) underflows to exactly 0, so illegal actions are never sampled, the legal "
                       "actions' probabilities sum to 1 among themselves, and every logit, log-probability and "
                       "gradient stays finite."),
                Choice("It zeroes the illegal actions' probabilities after the softmax.",
                       "Without renormalising, the remaining probabilities no longer sum to 1, and log-probabilities "
                       "and entropy computed from the raw logits still count the illegal actions."),
            ),
            answer="c",
        ),
        Question(
            "In the PPO update, under which mask does labcore recompute log pi_new(a) and the entropy of a stored "
            "transition?",
            (
                Choice("The mask stored with the transition: the legal actions when the action was chosen.",
                       "The ratio pi_new(a) / pi_old(a) must compare two distributions over the same legal set, "
                       "and the entropy over the legal actions has log(number of legal actions) as its ceiling, "
                       "so the bonus never rewards probability on impossible actions."),
                Choice("No mask: masking matters only when acting.",
                       "Then pi_new spreads over every action while pi_old covered only the legal ones, which "
                       "biases the ratio, and the entropy bonus rewards mass on actions that can never be taken."),
                Choice("The mask of the env's current state.",
                       "The env has moved on: its current state is not the one the transition was taken in, and "
                       "its legal actions may differ."),
            ),
            answer="a",
        ),
        Question(
            "A minibatch sample has a (normalised) advantage A > 0, and its ratio r = pi_new(a) / pi_old(a) has "
            "already grown to 1.5, with clip_eps = 0.2. How hard does its policy-loss term push r further up?",
            (
                Choice("As hard as at r = 1: the clip limits the loss's value, not its gradient.",
                       "Look at which of the two terms min picks here, and at what that term depends on."),
                Choice("It pulls r back down to 1.2.",
                       "The clipped term is flat, not a restoring force: nothing in the policy loss pushes r back "
                       "into the clip range."),
                Choice("Its gradient is clipped to magnitude 0.2.",
                       "clip_eps bounds the ratio inside the objective, not the gradient; gradient-norm clipping "
                       "(max_grad_norm) is a separate step in the optimiser."),
                Choice("Not at all: min(r A, clip(r, 0.8, 1.2) A) = 1.2 A does not depend on the parameters, so "
                       "its gradient is zero.",
                       "The clipped surrogate removes the incentive to move the ratio beyond 1 + eps in the "
                       "direction the advantage favours. With A < 0 at r = 1.5 the unclipped term is the smaller, "
                       "so that sample still pulls r down: the clip is pessimistic, not symmetric."),
            ),
            answer="d",
        ),
        Question(
            "Within one episode, what do gae_lambda = 0 and gae_lambda = 1 make of GAE's advantage A_t?",
            (
                Choice("lambda = 0: the Monte Carlo return minus V(s_t); lambda = 1: the one-step TD error.",
                       "Write A_t as the sum of the TD errors discounted by gamma * lambda, and look at each end "
                       "again."),
                Choice("lambda = 0: the one-step TD error r_t + gamma V(s_t+1) - V(s_t); lambda = 1: the discounted "
                       "rewards to the end of the rollout, bootstrapped with V there, minus V(s_t).",
                       "GAE sums the TD errors discounted by gamma * lambda. lambda trades bias from the value "
                       "estimate (largest at 0) against variance from the sampled rewards (largest at 1)."),
                Choice("lambda = 0: every advantage is zero; lambda = 1: the one-step TD error.",
                       "lambda = 0 does not silence the first TD error; lambda weights only what comes after it."),
                Choice("lambda is the discount: 0 ignores future rewards, 1 counts them undiscounted.",
                       "gamma is the discount and applies in both cases; lambda weights longer bootstrapped "
                       "returns against shorter ones."),
            ),
            answer="b",
        ),
        Question(
            "A Vault episode is cut off by its 100-step limit at step t (truncated, not terminated). How does "
            "labcore's PPO, with bootstrap_truncation=True, treat that step?",
            (
                Choice("Exactly like a termination: no value is counted after the cut.",
                       "That is the habit of CleanRL's ppo.py. It treats a time limit as a real ending, so the "
                       "critic learns that states reached late are worth less than they are."),
                Choice("GAE bootstraps from the next observation of the rollout.",
                       "After the automatic reset that observation is the first of a new episode."),
                Choice("done[t] stops GAE at t, and gamma * V(final observation) is added to that step's reward.",
                       "The reset observation belongs to the next episode, so GAE must stop there; the critic's "
                       "value of the real last observation stands in for the rewards the episode would have "
                       "gone on to earn."),
                Choice("The step is dropped from the batch.",
                       "It stays: its reward and action are real experience."),
            ),
            answer="c",
        ),
    ),
)
