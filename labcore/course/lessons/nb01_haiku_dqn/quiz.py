"""Lesson 01's quiz: the target network, terminal and truncated steps, replay and the Huber loss."""

from labcore.course.exercises.quizzing import Choice, Question, Quiz

QUIZ = Quiz(
    lesson="01",
    title="A Haiku DQN",
    questions=(
        Question(
            "labcore's DQN computes its TD target with target_params, a copy of the online parameters that is "
            "refreshed only every target_update_frequency agent steps. What does this target network buy?",
            (
                Choice("It saves the backward pass through the next-state forward pass.",
                       "A stop_gradient on the online network's next-state values would save that just as well; "
                       "the point of a separate copy is what the target depends on, not what it costs."),
                Choice("It removes the over-estimation that comes from taking a max over noisy estimates.",
                       "That is Double DQN's aim (the online network picks a', the target network values it). A "
                       "plain target network still takes the max over its own noisy estimates."),
                Choice("A regression target that holds still between copies, so a gradient step does not move the "
                       "very values it is chasing.",
                       "With the online network in the target, a step that raises Q(s, a) also raises Q(s', a') "
                       "and the target with it, which feeds oscillation and divergence; a frozen copy turns each "
                       "stretch between copies into an ordinary regression."),
                Choice("A second network whose gradients add to the online network's: a stronger learning signal.",
                       "No gradient reaches target_params: jax.value_and_grad differentiates the loss with respect "
                       "to params alone, and the target is wrapped in stop_gradient. The copy is only overwritten."),
            ),
            answer="c",
        ),
        Question(
            "A CartPole episode reaches the 500-step time limit: its last transition has truncated=True and "
            "terminated=False. Which TD target does labcore train that transition towards?",
            (
                Choice("r + gamma * max_a' Q_target(s', a'), with s' the episode's real last observation.",
                       "The episode was cut, not ended: its last state still has a future, so the target keeps "
                       "bootstrapping. The discount is gamma * (1 - terminated), and the stored next_obs is the "
                       "final observation, not the one after the reset."),
                Choice("r alone, as at every episode end.",
                       "That is the habit gamma * (1 - done) with done = terminated or truncated: it teaches the "
                       "agent that states reached at the time limit are worth only their reward."),
                Choice("r + gamma * max_a' Q_target(s', a'), with s' the first observation of the next episode, "
                       "which the vector env returns after its automatic reset.",
                       "That observation belongs to another episode: bootstrapping from it mixes the values of "
                       "two episodes."),
                Choice("None: truncated transitions are not stored.",
                       "They are stored like any other: the reward and the move are real experience."),
            ),
            answer="a",
        ),
        Question(
            "Why does DQN learn from minibatches drawn uniformly from a replay buffer rather than from each "
            "transition as it arrives?",
            (
                Choice("Replay makes the learning on-policy, which Q-learning requires.",
                       "The other way round: Q-learning is off-policy, and that is what allows it to learn from "
                       "transitions collected by older, more exploratory policies."),
                Choice("The buffer is where the target network reads its targets from.",
                       "The target network is a copy of the parameters, not of data: it evaluates the sampled "
                       "next observations, just as the online network evaluates the observations."),
                Choice("Sampling from a buffer removes the need for exploration.",
                       "The buffer holds only what the behaviour policy did; without epsilon-greedy exploration "
                       "it fills with the narrow experience of the greedy policy."),
                Choice("Consecutive transitions are strongly correlated; a uniform sample from many past steps is "
                       "closer to independent data, and every transition is reused in many updates.",
                       "Trained on the stream, the network would fit the part of the state space the agent is in "
                       "now and forget the rest. Replay decorrelates the batch, averages over recent behaviour "
                       "policies and makes each environment step count several times."),
            ),
            answer="d",
        ),
        Question(
            "The Nature DQN's 'error clipping' is the Huber loss with delta = 1. What does it do with a TD "
            "error of 3?",
            (
                Choice("It clips the error to 1 before squaring: the loss is 0.5 and the gradient 0.",
                       "Clipping the error itself would make the loss flat beyond delta, so large errors would "
                       "stop teaching anything at all."),
                Choice("The loss is linear beyond delta: 2.5, with a gradient of magnitude 1, the TD error's "
                       "gradient clipped to [-1, 1].",
                       "Huber is 0.5 x^2 for |x| <= 1 and |x| - 0.5 beyond, so a large error still pulls, but no "
                       "harder than an error of 1: rare large errors cannot dominate an update."),
                Choice("It clips the reward to [-1, 1].",
                       "Reward clipping is separate Atari preprocessing, applied to the env's rewards; the Huber "
                       "loss acts on the TD error, whatever the rewards are."),
                Choice("Nothing: it equals 0.5 * td^2 for every error.",
                       "The two agree only for |td| <= 1; at 3 the squared loss is 4.5, with gradient 3."),
            ),
            answer="b",
        ),
    ),
)
