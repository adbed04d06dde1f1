"""Lesson 06's quiz: the quantile Huber loss, its asymmetric weight, the sampled taus and the target action."""

from labcore.course.exercises.quizzing import Choice, Question, Quiz

QUIZ = Quiz(
    lesson="06",
    title="IQN, ported from PyTorch",
    questions=(
        Question(
            "In the IQN loss, td[b, i, j] = target_j - expected_i, an [N, N] block per transition. What does it "
            "compare?",
            (
                Choice("Each predicted quantile with the target at the same fraction: the N pairs where i = j.",
                       "The prediction's fractions and the target's are drawn independently, so pairing them by "
                       "index has no meaning."),
                Choice("Every predicted quantile of Z(s, a), at fractions tau_i, with every target sample: the "
                       "reward plus the discounted target-network quantile at (s', a*), at its own fractions "
                       "tau'_j.",
                       "The N target values are samples of the target return distribution; each predicted "
                       "quantile is pulled towards all of them, harder from below or from above according to its "
                       "own tau_i."),
                Choice("The online network's mean over taus with the target network's mean over taus: DQN's TD "
                       "error.",
                       "Comparing means throws the distribution away. IQN's loss works quantile against sample; "
                       "Q, the mean over taus, is used only to choose actions."),
            ),
            answer="b",
        ),
        Question(
            "Each Huber term of the loss is multiplied by |tau_i - 1{td < 0}|. Why?",
            (
                Choice("To correct for fractions that were not drawn uniformly: an importance weight.",
                       "The fractions are drawn uniformly from U(0, 1), and the weight depends on the sign of "
                       "the error, which an importance weight would not."),
                Choice("To clip large gradients.",
                       "The Huber part does that (linear beyond kappa = 1); the weight changes how under- and "
                       "over-estimates are treated, not how large errors are."),
                Choice("To drop transitions whose stacked frames straddle two episodes.",
                       "That is the valid mask, a separate factor; the quantile weight applies to every term."),
                Choice("It makes output i settle at the tau_i-quantile of the target distribution rather than at "
                       "its mean: an under-estimate (td > 0) costs tau_i, an over-estimate 1 - tau_i.",
                       "At tau = 0.9 under-estimates cost 9 times more than over-estimates, so the output settles "
                       "where 90% of the target mass lies below it (smoothed near zero by the Huber part). "
                       "Without the weight every output would learn the same central value."),
            ),
            answer="d",
        ),
        Question(
            "How are the quantile fractions tau drawn for the loss in the port's train step?",
            (
                Choice("Fresh from U(0, 1) at every train step, independently for each of the loss's three "
                       "forwards (the next-state action choice, the target, the prediction), N per transition.",
                       "Fractions sampled anew each time train the network on the whole quantile function, not "
                       "on a fixed set of points, and independent draws for the target and the prediction are "
                       "what the N x N comparison needs. Acting draws n_tau_act fresh fractions too."),
                Choice("A fixed, evenly spaced grid of N fractions, the same at every step.",
                       "That is QR-DQN's choice, fixed quantile midpoints. IQN's network takes tau as an input "
                       "and is trained on fractions drawn anew each time."),
                Choice("One draw shared by the prediction and the target, so that quantile i meets target "
                       "quantile i.",
                       "The loss's forwards do not share their fractions: each has its own, from its own key."),
                Choice("Learned by the network along with its weights.",
                       "That is the fraction proposal network of a later method (FQF). Here the fractions are "
                       "random inputs, drawn from the key passed to the loss."),
            ),
            answer="a",
        ),
        Question(
            "How does the port choose the next action a* whose target quantiles the loss uses?",
            (
                Choice("The argmax over actions of the target network's mean quantile at s'.",
                       "That is a target without double DQN, which the port, like the original iRainbow, "
                       "uses."),
                Choice("The action the agent actually took at the next step.",
                       "That would be a SARSA-style target; the batch stores only the action taken at s, and the "
                       "target maximises over actions."),
                Choice("The argmax over actions of the local network's quantiles at s', averaged over its sampled "
                       "taus; the target network's quantiles at a* then form the target.",
                       "This is double DQN in distributional form: Q(s', a) is the mean of Z_tau(s', a) over the "
                       "fractions, the local (online) network selects the action and the target network "
                       "evaluates it, which curbs the over-estimation of a max over noisy estimates."),
                Choice("The argmax of a single quantile, such as the median, at s'.",
                       "That would be a risk-sensitive choice; the port, like risk-neutral IQN, ranks actions by "
                       "an estimate of Q."),
            ),
            answer="c",
        ),
    ),
)
