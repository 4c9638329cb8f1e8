"""Recurrent IMPACT and IMPALA: the stored LSTM states, the learner's replay against a slow step-by-step reference,
every collector, predict/save/load, and the refusals."""

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from sb3_contrib import RecurrentPPO
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy

from sb3_impact import IMPACT, IMPALA, PPOAMBER, PTRPPO, VRACER, SACReFER, TD3ReFER
from sb3_impact.common.collectors.sampler import SegmentSampler
from sb3_impact.common.recurrent import constructor_parameters
from sb3_impact.common.segment_loop import frozen_policy_copy
from sb3_impact.common.training_batch import TrainingBatch

SMALL_LSTM = dict(lstm_hidden_size=8, net_arch=[8])


class RandomEndsEnv(gym.Env):
    """Random observations; an episode ends with probability 0.15 a step (a termination), else at its time limit."""

    observation_space = gym.spaces.Box(-5.0, 5.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def _observation(self) -> np.ndarray:
        return self.np_random.normal(size=3).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._observation(), {}

    def step(self, action):
        return self._observation(), float(action), bool(self.np_random.random() < 0.15), False, {}


def random_ends(max_episode_steps: int = 7):
    """Short episodes that end by termination or by time limit: both inside every segment."""
    return gym.wrappers.TimeLimit(RandomEndsEnv(), max_episode_steps=max_episode_steps)


def recurrent_policy(env, **kwargs) -> RecurrentActorCriticPolicy:
    policy = RecurrentActorCriticPolicy(env.observation_space, env.action_space, lambda _: 1e-3, **{**SMALL_LSTM, **kwargs})
    policy.set_training_mode(False)
    return policy


def small_recurrent_model(algo, collector: str, device: str = "cpu"):
    """``algo`` with a small LSTM policy on two envs of random-length episodes, 8-step segments."""
    return algo(
        "MlpLstmPolicy", make_vec_env(random_ends, n_envs=2, seed=0), n_steps=8, batch_size=8, collector=collector,
        policy_kwargs=SMALL_LSTM, seed=0, device=device,
    )  # fmt: skip


def collect(policy, n_envs=3, n_steps=12, segments=3, seed=0):
    env = make_vec_env(random_ends, n_envs=n_envs, seed=seed)
    th.manual_seed(seed)
    sampler = SegmentSampler(env, policy, n_steps, env.reset())
    return [sampler.collect() for _ in range(segments)]


@th.no_grad()
def reference_replay(policy: RecurrentActorCriticPolicy, segment):
    """
    The slow reference, written with sb3-contrib's own one-step methods: each step from the states before it, zeroed
    at episode starts; log pi(a_t|.), V(s_t), V(next observation) and V(final observation) of each time-limit end.
    """
    states = RNNStates(
        *(tuple(th.as_tensor(array) for array in pair) for pair in (segment.lstm_states[:2], segment.lstm_states[2:]))
    )
    log_probs, values, states_after = [], [], []
    for step in range(segment.n_steps):
        observation = th.as_tensor(segment.observations[step])
        starts = th.as_tensor(segment.episode_starts[step], dtype=th.float32)
        distribution, _ = policy.get_distribution(observation, states.pi, starts)
        log_probs.append(distribution.log_prob(th.as_tensor(segment.actions[step])))
        _, step_values, _, states = policy.forward(observation, states, starts)
        values.append(step_values.flatten())
        states_after.append(states)
    ended = th.as_tensor(segment.dones[-1], dtype=th.float32)
    bootstrap = policy.predict_values(th.as_tensor(segment.next_observations), states.vf, ended).flatten()
    final_values = np.zeros((segment.n_steps, segment.n_envs), dtype=np.float32)
    for row, (step, env) in enumerate(segment.final_observation_indices):
        vf = states_after[step].vf
        final_values[step, env] = policy.predict_values(
            th.as_tensor(segment.final_observations[row : row + 1]),
            (vf[0][:, env : env + 1], vf[1][:, env : env + 1]),
            th.zeros(1),
        ).item()
    return th.stack(log_probs), th.stack(values), bootstrap, th.as_tensor(final_values)


@pytest.mark.parametrize(
    "lstm_kwargs",
    [dict(), dict(enable_critic_lstm=False, shared_lstm=True), dict(enable_critic_lstm=False), dict(n_lstm_layers=2)],
    ids=["critic_lstm", "shared_lstm", "no_critic_lstm", "two_layers"],
)
def test_learner_replay_equals_the_behaviour_and_the_step_by_step_reference(lstm_kwargs):
    env = random_ends()
    policy = recurrent_policy(env, **lstm_kwargs)
    segments = collect(policy)
    assert any(segment.terminations.any() for segment in segments) and any(len(s.final_observation_indices) for s in segments)
    assert any(segment.episode_starts[1:].any() for segment in segments)
    for segment in segments:
        batch = TrainingBatch.from_segment(segment, th.device("cpu"))
        with th.no_grad():
            distribution, values = batch.evaluate(policy)
            log_probs = distribution.log_prob(batch.actions).reshape(segment.n_steps, segment.n_envs)
            bootstrap, final_values = batch.bootstrap_values(policy)
            value_only = batch.predict_values(policy)
        # IMPACT's target evaluation: one replay for the values and the bootstrap values.
        one_distribution, one_values, one_bootstrap, one_final = batch.evaluate_with_bootstrap(policy)
        one_log_probs = one_distribution.log_prob(batch.actions).reshape(log_probs.shape)
        pairs = [(one_log_probs, log_probs), (one_values, values), (one_bootstrap, bootstrap), (one_final, final_values)]
        for single, separate in pairs:
            np.testing.assert_allclose(single.numpy(), separate.numpy(), atol=1e-6, rtol=0)
        # The behaviour's log-probabilities, recorded step by step while sampling: the learner's with equal weights.
        np.testing.assert_allclose(log_probs.numpy(), segment.behaviour_log_probs, atol=1e-6, rtol=0)
        ref_log_probs, ref_values, ref_bootstrap, ref_final = reference_replay(policy, segment)
        np.testing.assert_allclose(log_probs.numpy(), ref_log_probs.numpy(), atol=1e-6, rtol=0)
        np.testing.assert_allclose(values.reshape(segment.n_steps, -1).numpy(), ref_values.numpy(), atol=1e-6, rtol=0)
        np.testing.assert_allclose(value_only.numpy(), values.numpy(), atol=1e-6, rtol=0)
        np.testing.assert_allclose(bootstrap.numpy(), ref_bootstrap.numpy(), atol=1e-6, rtol=0)
        np.testing.assert_allclose(final_values.numpy(), ref_final.numpy(), atol=1e-6, rtol=0)


def test_recurrent_gsde_replay_equals_the_behaviour():
    """gSDE over the LSTM's latent: the learner's replay at the behaviour's weights gives the recorded log-probabilities."""
    env = make_vec_env(lambda: gym.make("Pendulum-v1", max_episode_steps=7), n_envs=3, seed=0)
    policy = recurrent_policy(env, use_sde=True)
    sampler = SegmentSampler(env, policy, 12, env.reset())
    sampler.sde_sample_freq = 4
    for _ in range(2):
        segment = sampler.collect()
        assert segment.truncations.any()
        batch = TrainingBatch.from_segment(segment, th.device("cpu"))
        with th.no_grad():
            distribution, _ = batch.evaluate(policy)
        log_probs = distribution.log_prob(batch.actions).reshape(segment.n_steps, segment.n_envs)
        np.testing.assert_allclose(log_probs.numpy(), segment.behaviour_log_probs, atol=1e-6, rtol=0)


@pytest.mark.parametrize("algo", [IMPACT, IMPALA])
def test_recurrent_gsde_learns_with_the_process_collector(algo):
    model = algo(
        "MlpLstmPolicy", "Pendulum-v1", n_steps=8, batch_size=8, use_sde=True, sde_sample_freq=4, collector="process",
        policy_kwargs=SMALL_LSTM, seed=0, device="cpu",
    )  # fmt: skip
    model.learn(160)
    assert model.num_timesteps == model.sampled_steps == model.trained_steps + model.dropped_steps == 160


def test_segments_are_contiguous_in_their_lstm_states_and_start_fresh_after_a_restart():
    env = random_ends()
    policy = recurrent_policy(env)
    first, second, _ = collect(policy)
    assert first.episode_starts[0].all()  # a new sampler: every environment starts an episode
    np.testing.assert_array_equal(second.episode_starts[0], first.dones[-1])
    # The second segment starts from the states the first left: replaying both as one sequence gives the same.
    batch_one = TrainingBatch.from_segment(first, th.device("cpu"))
    with th.no_grad():
        from sb3_impact.common.recurrent import recurrent_forward

        output = recurrent_forward(policy, batch_one.observations, batch_one.lstm_states, batch_one.episode_starts)
    for stored, replayed in zip(second.lstm_states, (*output.states.pi, *output.states.vf), strict=True):
        np.testing.assert_allclose(stored, replayed.numpy(), atol=1e-6, rtol=0)


def test_recurrent_minibatches_are_whole_env_columns_and_match_the_whole_batch():
    env = random_ends()
    policy = recurrent_policy(env)
    (segment,) = collect(policy, n_envs=4, n_steps=6, segments=1)
    batch = TrainingBatch.from_segment(segment, th.device("cpu"))
    indices = batch.minibatch_indices(batch_size=12)
    assert len(indices) == 2
    covered = th.sort(th.cat(indices)).values
    np.testing.assert_array_equal(covered.numpy(), np.arange(batch.size))
    with th.no_grad():
        whole, whole_values = batch.evaluate(policy)
        whole_log_probs = whole.log_prob(batch.actions)
        for minibatch_indices in indices:
            minibatch = batch.minibatch(minibatch_indices)
            assert len(minibatch.envs) == 2
            np.testing.assert_array_equal(
                (minibatch_indices % batch.n_envs).reshape(batch.n_steps, -1)[0].numpy(), minibatch.envs.numpy()
            )
            distribution, values = batch.evaluate(policy, minibatch)
            np.testing.assert_allclose(
                distribution.log_prob(minibatch.actions).numpy(), whole_log_probs[minibatch_indices].numpy(), atol=1e-6
            )
            np.testing.assert_allclose(values.numpy(), whole_values[minibatch_indices].numpy(), atol=1e-6)


def test_a_policy_copy_keeps_the_lstm_sizes():
    env = random_ends()
    policy = recurrent_policy(env, n_lstm_layers=2, enable_critic_lstm=False, shared_lstm=True)
    copy = frozen_policy_copy(policy, "cpu")
    assert constructor_parameters(copy)["lstm_hidden_size"] == 8
    for (name, tensor), (_, copied) in zip(policy.state_dict().items(), copy.state_dict().items(), strict=True):
        assert th.equal(tensor, copied), name


@pytest.mark.parametrize("algo", [IMPACT, IMPALA])
@pytest.mark.parametrize("collector", ["sync", "thread", "process"])
def test_recurrent_learn_with_each_collector_counts_every_step(algo, collector):
    model = small_recurrent_model(algo, collector)
    model.learn(160)
    assert model.num_timesteps == model.sampled_steps == model.trained_steps + model.dropped_steps == 160
    assert model.gradient_steps > 0


def test_recurrent_sync_learning_is_reproducible_with_a_seed():
    def parameters():
        model = IMPACT(
            "MlpLstmPolicy", "CartPole-v1", n_steps=8, collector="sync", policy_kwargs=SMALL_LSTM, seed=3, device="cpu"
        )
        model.learn(64)
        return th.nn.utils.parameters_to_vector(model.policy.parameters())

    assert th.equal(parameters(), parameters())


@pytest.mark.parametrize("algo", [IMPACT, IMPALA])
def test_recurrent_predict_save_load_as_recurrent_ppo(algo, tmp_path):
    model = algo("MlpLstmPolicy", "CartPole-v1", n_steps=8, collector="sync", policy_kwargs=SMALL_LSTM, seed=0, device="cpu")
    model.learn(32)
    env = model.get_env()
    observation = env.reset()
    actions, state = model.predict(observation, state=None, episode_start=np.ones(1, dtype=bool), deterministic=True)
    assert state is not None and state[0].shape == (1, 1, 8)  # RecurrentPPO's: (layers, envs, hidden)
    _, next_state = model.predict(observation, state=state, episode_start=np.zeros(1, dtype=bool), deterministic=True)
    assert not np.allclose(state[0], next_state[0])
    model.save(tmp_path / "model")
    loaded = algo.load(tmp_path / "model", env=env, device="cpu")
    assert isinstance(loaded.policy, RecurrentActorCriticPolicy)
    loaded_actions, loaded_state = loaded.predict(
        observation, state=None, episode_start=np.ones(1, dtype=bool), deterministic=True
    )
    np.testing.assert_array_equal(actions, loaded_actions)
    np.testing.assert_allclose(state[0], loaded_state[0])
    evaluate_policy(loaded, env, n_eval_episodes=2)  # SB3's evaluation carries the states through predict
    loaded.learn(16, reset_num_timesteps=False)


def test_recurrent_ppo_and_impact_agree_on_the_policy_api():
    """The same policy class as RecurrentPPO's: the names a RecurrentPPO user types build the same network."""
    ours = IMPACT("MlpLstmPolicy", "CartPole-v1", policy_kwargs=SMALL_LSTM, device="cpu", collector="sync")
    theirs = RecurrentPPO("MlpLstmPolicy", "CartPole-v1", policy_kwargs=SMALL_LSTM, device="cpu")
    assert type(ours.policy) is type(theirs.policy)
    assert [tuple(p.shape) for p in ours.policy.parameters()] == [tuple(p.shape) for p in theirs.policy.parameters()]


@pytest.mark.parametrize("algo", [PPOAMBER, PTRPPO, VRACER, SACReFER, TD3ReFER])
@pytest.mark.parametrize("policy", ["MlpLstmPolicy", RecurrentActorCriticPolicy])
def test_algorithms_without_recurrent_policies_refuse_them_at_construction(algo, policy):
    with pytest.raises(ValueError, match="does not support recurrent policies"):
        algo(policy, "Pendulum-v1", device="cpu")


def test_recurrent_batch_size_must_be_whole_segments():
    with pytest.raises(ValueError, match=r"batch_size \(12\) must be a multiple of n_steps"):
        IMPACT("MlpLstmPolicy", "CartPole-v1", n_steps=8, batch_size=12, policy_kwargs=SMALL_LSTM, device="cpu")
    with pytest.raises(ValueError, match=r"value_batch_size \(12\) must be a multiple of n_steps"):
        IMPALA("MlpLstmPolicy", "CartPole-v1", n_steps=8, n_value_epochs=1, value_batch_size=12, policy_kwargs=SMALL_LSTM)
    IMPALA("MlpLstmPolicy", "CartPole-v1", n_steps=8, n_value_epochs=0, value_batch_size=12, policy_kwargs=SMALL_LSTM)


def test_lstm_dropout_counts_as_a_mode_dependent_layer():
    from sb3_impact.common.modes import has_mode_dependent_layers

    kwargs = dict(n_lstm_layers=2, lstm_hidden_size=8, net_arch=[8])
    assert not has_mode_dependent_layers(IMPALA("MlpLstmPolicy", "CartPole-v1", policy_kwargs=kwargs).policy)
    with_dropout = dict(kwargs, lstm_kwargs=dict(dropout=0.5))
    assert has_mode_dependent_layers(IMPALA("MlpLstmPolicy", "CartPole-v1", policy_kwargs=with_dropout).policy)


def test_collect_rollouts_refuses_a_recurrent_policy():
    from stable_baselines3.common.callbacks import BaseCallback

    class Nothing(BaseCallback):
        def _on_step(self) -> bool:
            return True

    model = IMPACT("MlpLstmPolicy", "CartPole-v1", n_steps=8, policy_kwargs=SMALL_LSTM, device="cpu", collector="sync")
    callback = Nothing()
    callback.init_callback(model)
    with pytest.raises(ValueError, match="holds no LSTM state"):
        model.collect_rollouts(model.env, callback, model.rollout_buffer, 8)


@pytest.mark.parametrize("n_layers", [1, 2])
def test_packed_pieces_equal_a_step_by_step_lstm_with_resets_and_kept_states(n_layers):
    from sb3_impact.common.recurrent import lstm_sequence

    th.manual_seed(0)
    lstm = th.nn.LSTM(3, 5, num_layers=n_layers)
    n_steps, n_envs = 9, 4
    features = th.randn(n_steps, n_envs, 3)
    state = (th.randn(n_layers, n_envs, 5), th.randn(n_layers, n_envs, 5))
    starts = (th.rand(n_steps, n_envs) < 0.25).float()
    starts[0, 0], starts[4, 1], starts[8, 3], starts[1, 2], starts[6, 3] = 1.0, 1.0, 1.0, 1.0, 1.0
    keep_after = np.array([[0, 2], [3, 1], [8, 0], [5, 3], [8, 2]])  # episode ends (before a start) or the last step
    output, final, kept = lstm_sequence(lstm, features, state, starts, keep_after)
    # The reference: one step at a time, zeroing the state before each episode start.
    hidden, cell = state
    outputs, after = [], []
    for step in range(n_steps):
        mask = (1.0 - starts[step]).view(1, -1, 1)
        step_output, (hidden, cell) = lstm(features[step : step + 1], (mask * hidden, mask * cell))
        outputs.append(step_output)
        after.append((hidden, cell))
    th.testing.assert_close(output, th.cat(outputs), atol=1e-6, rtol=0)
    th.testing.assert_close(final[0], hidden, atol=1e-6, rtol=0)
    th.testing.assert_close(final[1], cell, atol=1e-6, rtol=0)
    for row, (step, env) in enumerate(keep_after):
        th.testing.assert_close(kept[0][:, row], after[step][0][:, env], atol=1e-6, rtol=0)
        th.testing.assert_close(kept[1][:, row], after[step][1][:, env], atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="must end an episode"):
        lstm_sequence(lstm, features, state, starts * (th.arange(n_steps) != 3).float().view(-1, 1), np.array([[2, 0]]))
    # Gradients flow through the packed pieces as through the steps.
    output.sum().backward()
    assert all(parameter.grad is not None and th.isfinite(parameter.grad).all() for parameter in lstm.parameters())


def test_recurrent_eval_and_checkpoint_callbacks(tmp_path):
    from stable_baselines3.common.callbacks import CheckpointCallback, EvalCallback

    model = IMPACT(
        "MlpLstmPolicy", "CartPole-v1", n_steps=8, policy_kwargs=SMALL_LSTM, seed=0, device="cpu", collector="thread"
    )
    evaluation = EvalCallback(
        make_vec_env("CartPole-v1", n_envs=1, seed=1), eval_freq=32, n_eval_episodes=2, log_path=str(tmp_path), verbose=0
    )
    checkpoint = CheckpointCallback(save_freq=32, save_path=str(tmp_path), name_prefix="recurrent")
    model.learn(96, callback=[evaluation, checkpoint])
    assert len(evaluation.evaluations_results) == 3 and all(len(results) == 2 for results in evaluation.evaluations_results)
    saved = sorted(tmp_path.glob("recurrent_*_steps.zip"))
    assert len(saved) == 3
    assert isinstance(IMPACT.load(saved[-1], device="cpu").policy, RecurrentActorCriticPolicy)


@pytest.mark.parametrize("collector", ["sync", "thread", "process"])
def test_a_continued_learn_keeps_the_episodes_and_lstm_states_where_its_envs_go_on(collector):
    model = IMPACT(
        "MlpLstmPolicy", make_vec_env(random_ends, n_envs=2, seed=0), n_steps=8, collector=collector,
        policy_kwargs=SMALL_LSTM, seed=0, device="cpu",
    )  # fmt: skip
    stored = []
    original = model._store_segment
    model._store_segment = lambda segment: (stored.append(segment), original(segment))[1]
    model.learn(64)
    first_call = len(stored)
    model.learn(64, reset_num_timesteps=False)
    second = stored[first_call]
    if collector == "process":  # the child stepped its own copy of the envs: the learner's are reset, states zeroed
        assert second.episode_starts[0].all() and not any(state.any() for state in second.lstm_states)
    else:  # the same envs go on: RecurrentPPO's learn() keeps its _last_lstm_states the same way
        assert model._last_obs is not None
        assert any(state.any() for state in second.lstm_states)  # carried, not zeros
        if collector == "sync":  # no segment was collected ahead: the last stored one is the last stepped
            np.testing.assert_array_equal(second.episode_starts[0], stored[first_call - 1].dones[-1])
    model.learn(16)  # reset_num_timesteps=True: SB3 resets the envs, every environment starts an episode
    assert stored[-1].episode_starts[0].all()
