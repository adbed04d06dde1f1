"""Lesson 12's quiz: what PQN drops from DQN and what replaces it, the Q(lambda) target, what the paper proves,
and when the targets are computed."""

from labcore.course.exercises.quizzing import Choice, Question, Quiz

QUIZ = Quiz(
    lesson="12",
    title="PQN",
    questions=(
        Question(
            "PQN keeps DQN's Q-learning but drops two of its parts. Which two, and what takes their place?",
            (
                Choice("Epsilon-greedy acting and the max in the target: PQN acts with a softmax policy and "
                       "bootstraps from the action it took, like SARSA.",
                       "PQN keeps both: it acts epsilon-greedily, and its targets bootstrap from max_a Q of the "
                       "next observation."),
                Choice("The replay buffer and the squared TD error: PQN learns on-policy with PPO's clipped "
                       "surrogate objective.",
                       "PQN borrows PPO's loop (rollout, then epochs of minibatches) but not its loss: it "
                       "regresses Q(s, a) onto its targets with the squared TD error."),
                Choice("The replay buffer and the target network: many envs stepped together give decorrelated "
                       "batches, and a LayerNorm in the Q-network lets it bootstrap from itself.",
                       "One step of many independent envs is already a varied batch, so each rollout is used "
                       "for a few epochs and thrown away; a LayerNorm before each hidden ReLU steadies the update "
                       "while the online network appears in its own target; Q(lambda) targets carry rewards back "
                       "several steps per update."),
                Choice("Only the target network; a small buffer of recent rollouts remains.",
                       "PQN keeps no buffer at all: its state is the parameters, the optimiser and the envs."),
            ),
            answer="c",
        ),
        Question(
            "Away from episode and rollout ends, PQN's target is G_t = r_t + gamma * ((1 - lambda) * "
            "max_a Q(s_{t+1}, a) + lambda * G_{t+1}). Which statement about it is right?",
            (
                Choice("lambda = 1 gives the one-step target, and lambda = 0 the sum of the rewards to the end of "
                       "the rollout.",
                       "Set lambda = 0 in the recursion: G_t = r_t + gamma * max_a Q(s_{t+1}, a), the one-step "
                       "target. It is the other way round."),
                Choice("At a time limit it treats the step as a terminal state: no bootstrap.",
                       "A time limit only cut the episode off; the state there still has a value. labcore "
                       "bootstraps from the episode's last observation (info[\"final_observation\"]); only a "
                       "terminal state stops the bootstrap."),
                Choice("lambda is a second discount: with lambda = 0.65, rewards are discounted by 0.65 * gamma "
                       "per step, so the agent grows short-sighted.",
                       "gamma alone discounts the rewards in every target. lambda sets how much a target leans on "
                       "the rewards actually received further on, rather than on the network's estimates."),
                Choice("It is a weighted average of n-step returns: (1 - lambda) * lambda**(n - 1) on the n-step "
                       "return, and what weight remains on the last one available.",
                       "Each n-step return adds n real rewards, then bootstraps from max_a Q (not after a terminal "
                       "state). When the episode or the rollout ends after n steps, that return takes all the "
                       "remaining weight; lambda = 0 gives the one-step target, lambda = 1 the rewards to the end."),
            ),
            answer="d",
        ),
        Question(
            "What do Gallici et al. prove about dropping the target network?",
            (
                Choice("That LayerNorm alone makes deep Q-learning converge, so any network with a LayerNorm can "
                       "drop its target network.",
                       "Their convergence result assumes LayerNorm together with a small L2 regularisation, under "
                       "further conditions; LayerNorm alone is not what is proved."),
                Choice("That with LayerNorm together with L2 regularisation, the TD update can be made stable "
                       "without a target network, even with off-policy data.",
                       "That is their theoretical result (under the paper's conditions). labcore's PQN uses the "
                       "LayerNorm without an L2 term: it learns well in the notebook's runs, but that setting is "
                       "not the one the theorem covers."),
                Choice("That a target network always slows Q-learning down, so removing it can only help.",
                       "The paper shows when the target network can go, not that it always hurts; without the "
                       "normalisation, the notebook's PQN with no target network ends lower in its runs."),
                Choice("That many parallel environments make TD convergent, so neither LayerNorm nor a target "
                       "network is needed.",
                       "The parallel envs replace the replay buffer, and their benefit is observed, not proved; "
                       "the notebook's ablation keeps the envs, drops the LayerNorm, and ends lower in its runs."),
            ),
            answer="b",
        ),
        Question(
            "In one PQN update of labcore, when are the Q(lambda) targets computed, and with which parameters?",
            (
                Choice("Once per rollout, backwards in time, with the parameters that collected it; the epochs "
                       "of minibatch steps then regress onto those fixed targets.",
                       "targets_of runs once per update, as a reverse lax.scan, and the loss treats the targets as "
                       "constants (stop_gradient). The parameters move during the epochs, but the targets do not; "
                       "then the rollout is discarded."),
                Choice("Again for every minibatch, with the latest parameters.",
                       "labcore computes them a single time per update, before any minibatch step, and never "
                       "revisits them during the epochs."),
                Choice("With a copy of the parameters refreshed every few thousand steps.",
                       "That copy would be a target network, which PQN does not have."),
                Choice("Never: PQN regresses onto each episode's Monte Carlo return.",
                       "A rollout (32 to 64 steps here) is shorter than most episodes; unless a terminal state "
                       "comes first, a target bootstraps from max_a Q where the rollout stops."),
            ),
            answer="a",
        ),
    ),
)
