"""ReF-ER for SAC and TD3: the replay buffer's bookkeeping, rho and the penalty against the paper, the rules."""

import math

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3 import SAC
from stable_baselines3.common.distributions import SquashedDiagGaussianDistribution
from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_impact import SACReFER, TD3ReFER
from sb3_impact.common.refer import is_near_policy
from sb3_impact.common.refer_replay import ReFERReplayBuffer, uniform_log_prob_pre_tanh
from tests.conftest import NonFiniteEnv

ALGOS = [SACReFER, TD3ReFER]


def small(algo, **kwargs):
    return algo("MlpPolicy", "Pendulum-v1", learning_starts=50, batch_size=32, buffer_size=1000, seed=0, **kwargs)


def stage_and_add(buffer: ReFERReplayBuffer, step: int) -> None:
    n, d = buffer.n_envs, buffer.action_dim
    zeros = np.zeros((n, d), dtype=np.float32)
    buffer.stage_behaviour(zeros, zeros, zeros, np.zeros(n), from_policy=True)
    obs = np.full((n, 3), step, dtype=np.float32)
    buffer.add(obs, obs, zeros, np.zeros(n), np.zeros(n), [{} for _ in range(n)])


def test_far_count_matches_a_recount_through_overwrites_and_repeated_samples():
    rng = np.random.default_rng(0)
    obs_space, action_space = spaces.Box(-1, 1, (3,)), spaces.Box(-1, 1, (2,))
    buffer = ReFERReplayBuffer(12, obs_space, action_space, device="cpu", n_envs=2)  # 6 slots x 2 envs
    c_max = 2.0
    for step in range(40):
        stage_and_add(buffer, step)
        batch = rng.integers(0, buffer.size(), size=8), rng.integers(0, 2, size=8)
        batch[0][1] = batch[0][0]  # a step sampled twice in one batch
        batch[1][1] = batch[1][0]
        buffer.update_log_rhos(batch, rng.normal(0.0, 1.0, size=8).astype(np.float32), c_max)
        stored = buffer.log_rhos[: buffer.size()]
        assert buffer.n_far == np.count_nonzero(np.abs(stored) >= math.log(c_max))
        assert buffer.far_fraction() == pytest.approx(buffer.n_far / stored.size)


def test_add_without_a_staged_behaviour_raises():
    buffer = ReFERReplayBuffer(10, spaces.Box(-1, 1, (3,)), spaces.Box(-1, 1, (1,)), device="cpu")
    obs = np.zeros((1, 3), dtype=np.float32)
    with pytest.raises(RuntimeError, match="stage_behaviour"):
        buffer.add(obs, obs, np.zeros((1, 1)), np.zeros(1), np.zeros(1), [{}])


def test_sac_log_rho_is_log_pi_over_mu_of_the_squashed_action_including_saturated_ones():
    """rho from the stored behaviour equals SB3's squashed-Gaussian density ratio, also for actions at +-1."""
    model = small(SACReFER)
    model.learn(60)  # past warm-up: steps from the policy
    model.replay_buffer.behaviour_mean[:] += 0.3  # as if an older policy had acted
    model.replay_buffer.behaviour_log_std[:] -= 0.2
    buffer = model.replay_buffer
    buffer.actions[0, 0] = 1.0  # saturated in float32
    buffer.actions[1, 0] = -1.0
    buffer.behaviour_points[:2] = np.arctanh(np.clip(buffer.actions[:2], -1 + 1e-6, 1 - 1e-6))
    reference_dist = SquashedDiagGaussianDistribution(1)
    points = th.as_tensor(buffer.behaviour_points[:60, 0])
    mu_mean, mu_log_std = th.as_tensor(buffer.behaviour_mean[:60, 0]), th.as_tensor(buffer.behaviour_log_std[:60, 0])
    gaussian_mu = th.distributions.Normal(mu_mean, th.exp(mu_log_std))
    buffer.behaviour_log_prob[:60, 0] = gaussian_mu.log_prob(points).sum(-1).numpy()  # as stored when acting

    data = buffer._get_samples(np.arange(60))
    with th.no_grad():
        mean, log_std, _ = model.actor.get_action_dist_params(data.observations)
        model._refer_reset_stats()
        model._refer_weights(data, mean, log_std)
        log_pi = reference_dist.proba_distribution(mean, log_std).log_prob(th.tanh(points), points)
        log_mu = reference_dist.proba_distribution(mu_mean, mu_log_std).log_prob(th.tanh(points), points)
    np.testing.assert_allclose(buffer.log_rhos[:60, 0], (log_pi - log_mu).numpy(), rtol=1e-4, atol=1e-3)
    assert np.all(np.isfinite(buffer.log_rhos))


def test_td3_log_rho_and_kl_are_the_paper_gaussian_ones():
    """DDPG with ReF-ER (appendix A): pi = N(m(s), sigma^2), rho and D_KL(mu || pi) in closed form."""
    model = small(TD3ReFER, action_noise=NormalActionNoise(np.zeros(1), np.full(1, 0.3)))
    model.learn(60)
    buffer = model.replay_buffer
    buffer.behaviour_mean[:60] += 0.25
    buffer.behaviour_log_prob[:60, 0] = -0.5 * ((buffer.actions[:60, 0, 0] - buffer.behaviour_mean[:60, 0, 0]) / 0.3) ** 2
    buffer.behaviour_log_prob[:60, 0] -= math.log(0.3) + 0.5 * math.log(2 * math.pi)
    data = buffer._get_samples(np.arange(50, 60))
    with th.no_grad():
        m_pi = model.actor(data.observations)
        model._refer_reset_stats()
        near, kl = model._refer_weights(data, m_pi, th.full_like(m_pi, math.log(0.3)))
    a, m_mu = data.actions[:, 0], data.behaviour_mean[:, 0]
    expected_log_rho = ((a - m_mu) ** 2 - (a - m_pi[:, 0]) ** 2) / (2 * 0.3**2)
    np.testing.assert_allclose(buffer.log_rhos[50:60, 0], expected_log_rho.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(kl[:, 0].numpy(), ((m_mu - m_pi[:, 0]) ** 2 / (2 * 0.3**2)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(near[:, 0].numpy(), is_near_policy(expected_log_rho, model.c_max).float().numpy())


def test_uniform_warm_up_density_is_the_change_of_variables_through_tanh():
    actions = np.array([[0.0, 0.5], [-0.99, 0.999999], [1.0, -1.0]], dtype=np.float32)
    u = th.atanh(th.as_tensor(np.clip(actions.astype(np.float64), -1 + 1e-6, 1 - 1e-6)))
    # density of u = uniform density of a (1/2 per dimension) times |da/du| = 1 - tanh(u)^2
    u.requires_grad_(True)
    th.tanh(u).sum().backward()  # elementwise map: u.grad holds da/du
    expected = (th.log(u.grad) - math.log(2)).sum(-1)
    np.testing.assert_allclose(uniform_log_prob_pre_tanh(actions), expected.numpy(), rtol=1e-6)
    assert np.all(np.isfinite(uniform_log_prob_pre_tanh(actions)))


@pytest.mark.parametrize("algo", ALGOS)
def test_far_policy_steps_give_no_critic_and_no_actor_gradient(algo):
    """Rule 1 alone, every stored step far: one update leaves the critic and the actor where they were."""
    model = small(algo, refer_rules=(1,))
    model.learn(60)
    model.replay_buffer.behaviour_log_prob[:] = 1e3  # rho = pi / mu ~ exp(-1000): far
    if algo is TD3ReFER:
        model.policy_delay = 1  # an actor update in this step
    model.train(gradient_steps=1, batch_size=32)
    for parameters in (model.critic.parameters(), model.actor.parameters()):
        assert all(p.grad is None or not p.grad.any() for p in parameters)
    assert model.logger.name_to_value["train/batch_near_fraction"] == 0.0


@pytest.mark.parametrize("algo", ALGOS)
def test_beta_follows_eq_12_and_far_steps_still_get_the_penalty(algo):
    model = small(algo)
    model.learn(60)
    model.replay_buffer.behaviour_log_prob[:] = 1e3
    model.replay_buffer.behaviour_mean[:] += 0.5  # the penalty pulls the actor towards mu
    if algo is TD3ReFER:
        model.policy_delay = 1
    model.beta = 0.5
    learning_rate = model.actor.optimizer.param_groups[0]["lr"]
    model.train(gradient_steps=1, batch_size=32)
    assert model.replay_buffer.far_fraction() > model.refer_d
    assert model.beta == pytest.approx((1 - learning_rate) * 0.5)  # n_far / N > D
    assert any(p.grad is not None and p.grad.any() for p in model.actor.parameters())  # (1 - beta) grad D_KL


@pytest.mark.parametrize("penalize_std", [True, False])
def test_sac_penalty_moves_the_std_only_when_asked(penalize_std):
    """With ``beta = 0`` the actor's loss is the penalty alone: its std head gets a gradient only if penalised."""
    model = small(SACReFER, refer_penalize_std=penalize_std)
    model.learn(60)
    model.replay_buffer.behaviour_mean[:] += 0.5
    model.replay_buffer.behaviour_log_std[:] += 1.0  # wider behaviours: D_KL(mu || pi) pulls log_std up
    model.beta = 0.0
    model.train(gradient_steps=1, batch_size=32)
    std_gradients = [p.grad for p in model.actor.log_std.parameters()]
    assert all(g is not None for g in std_gradients)
    assert any(g.any() for g in std_gradients) == penalize_std
    assert any(p.grad.any() for p in model.actor.mu.parameters())  # the mean is pulled either way


def test_refer_penalize_std_is_a_bool_and_survives_save_load(tmp_path):
    with pytest.raises(TypeError, match="refer_penalize_std"):
        SACReFER("MlpPolicy", "Pendulum-v1", refer_penalize_std="no")
    small(SACReFER, refer_penalize_std=False).save(tmp_path / "model")
    assert SACReFER.load(tmp_path / "model").refer_penalize_std is False


@pytest.mark.parametrize("algo", ALGOS)
def test_shared_critic_step_is_the_sb3_loss_on_near_steps(algo):
    """``_refer_critic_step`` (SAC's and TD3's): ``scale * sum_i mean(near (Q_i - y)^2)``, far steps give no gradient."""
    model = small(algo)
    model.learn(60)
    data = model.replay_buffer.sample(8)
    near = th.tensor([[1.0], [0.0]] * 4)
    target = th.randn(8, 1)
    with th.no_grad():
        squares = [((q - target) ** 2 * near).mean() for q in model.critic(data.observations, data.actions)]
    state = {key: value.clone() for key, value in model.critic.state_dict().items()}
    optimizer_state = model.critic.optimizer.state_dict()
    loss = model._refer_critic_step(data, target, near, scale=0.5)
    assert loss == pytest.approx(0.5 * float(sum(squares)), rel=1e-6)
    gradients = [p.grad.clone() for p in model.critic.parameters()]
    model.critic.load_state_dict(state)
    model.critic.optimizer.load_state_dict(optimizer_state)
    other_target = th.where(near.bool(), target, target + 10.0)  # only the far steps' targets move
    model._refer_critic_step(data, other_target, near, scale=0.5)
    for gradient, parameter in zip(gradients, model.critic.parameters(), strict=True):
        th.testing.assert_close(parameter.grad, gradient)


@pytest.mark.parametrize("algo, name", [(SACReFER, "SACReFER"), (TD3ReFER, "TD3ReFER")])
def test_learn_names_the_tensorboard_run_after_the_algorithm(algo, name, monkeypatch):
    sb3_class = algo.__mro__[2]  # SAC or TD3, after ReFERMixin
    names = []
    monkeypatch.setattr(sb3_class, "learn", lambda self, **kwargs: names.append(kwargs["tb_log_name"]) or self)
    model = small(algo)
    assert model.learn(10) is model and model.learn(10, tb_log_name="mine") is model
    assert names == [name, "mine"]


def test_actor_loss_is_eq_10():
    model = small(SACReFER)
    model.beta = 0.7
    losses, near, kl = th.tensor([[1.0], [2.0], [3.0]]), th.tensor([[1.0], [0.0], [1.0]]), th.tensor([[0.5], [1.0], [1.5]])
    assert model._refer_actor_loss(losses, near, kl).item() == pytest.approx(0.7 * 4.0 / 3 + 0.3 * 1.0)
    model.refer_rules = (1,)
    assert model._refer_actor_loss(losses, near, kl).item() == pytest.approx(4.0 / 3)


@pytest.mark.parametrize("algo", ALGOS)
def test_learns_logs_and_round_trips_through_save_load(algo, tmp_path):
    model = small(algo)
    model.learn(300)
    values = model.logger.name_to_value
    for key in ("train/beta", "train/c_max", "train/far_fraction", "train/batch_near_fraction", "train/kl_mu_pi"):
        assert np.isfinite(values[key]), key
    assert 0.0 <= model.replay_buffer.far_fraction() <= 1.0 and 0.0 <= model.beta <= 1.0
    model.save(tmp_path / "model")
    loaded = algo.load(tmp_path / "model")
    assert loaded.refer_rules == (1, 2) and loaded.beta == model.beta
    observations = model.env.reset()
    np.testing.assert_allclose(
        loaded.predict(observations, deterministic=True)[0], model.predict(observations, deterministic=True)[0]
    )
    loaded.set_env(model.env)
    loaded.learn(100, reset_num_timesteps=False)


@pytest.mark.parametrize(
    "algo, kwargs, error, match",
    [
        (SACReFER, {"use_sde": True}, ValueError, "use_sde"),
        (SACReFER, {"action_noise": NormalActionNoise(np.zeros(1), np.ones(1))}, ValueError, "action_noise"),
        (SACReFER, {"n_steps": 3}, ValueError, "n_steps"),
        (SACReFER, {"replay_buffer_class": ReFERReplayBuffer.__base__}, ValueError, "ReFERReplayBuffer"),
        (SACReFER, {"refer_d": 1.5}, ValueError, "refer_d"),
        (SACReFER, {"refer_rules": (3,)}, ValueError, "refer_rules"),
        (TD3ReFER, {"action_noise": OrnsteinUhlenbeckActionNoise(np.zeros(1), np.ones(1))}, ValueError, "NormalActionNoise"),
        (TD3ReFER, {"action_noise": NormalActionNoise(np.ones(1), np.ones(1))}, ValueError, "zero-mean"),
        (TD3ReFER, {"refer_c": -1.0}, ValueError, "refer_c"),
    ],
)
def test_bad_arguments_raise_naming_them(algo, kwargs, error, match):
    with pytest.raises(error, match=match):
        algo("MlpPolicy", "Pendulum-v1", **kwargs)


@pytest.mark.parametrize("algo", ALGOS)
def test_dict_observations_raise_type_error(algo):
    from stable_baselines3.common.envs import SimpleMultiObsEnv

    class BoxActions(SimpleMultiObsEnv):
        def __init__(self):
            super().__init__(random_start=False)
            self.action_space = spaces.Box(-1, 1, (1,))

    with pytest.raises(TypeError, match="Dict"):
        algo("MultiInputPolicy", BoxActions())


def test_td3_without_noise_explores_with_the_paper_sigma():
    model = TD3ReFER("MlpPolicy", "Pendulum-v1")
    assert isinstance(model.action_noise, NormalActionNoise)
    np.testing.assert_allclose(np.exp(model.noise_log_std), 0.2, rtol=1e-6)


@pytest.mark.parametrize("what", ["observation", "reward"])
@pytest.mark.parametrize("algo", ALGOS)
def test_non_finite_data_from_an_env_raises_naming_the_env(algo, what):
    env = DummyVecEnv([lambda: NonFiniteEnv(bad=False), lambda: NonFiniteEnv(bad=True, what=what)])
    model = algo("MlpPolicy", env, learning_starts=10, batch_size=8, seed=0)
    with pytest.raises(ValueError, match="environment index 1 returned a NaN or infinite"):
        model.learn(200)


def test_no_rules_is_sb3s_sac():
    """
    ``refer_rules=()``, the ablation of the benchmarks' tables, trains as SB3's SAC does: the same weights. (TD3ReFER
    differs from TD3 without the rules: it explores with the paper's Gaussian where TD3 has no noise.)
    """
    kwargs = dict(learning_starts=50, batch_size=32, buffer_size=1000, seed=0)  # one torch thread (conftest.py)
    ablation = SACReFER("MlpPolicy", "Pendulum-v1", refer_rules=(), **kwargs).learn(300)
    reference = SAC("MlpPolicy", "Pendulum-v1", **kwargs).learn(300)
    assert ablation.logger.name_to_value["train/beta"] == 1.0  # rule 2 off: no penalty
    ours, theirs = ablation.policy.state_dict(), reference.policy.state_dict()
    assert ours.keys() == theirs.keys()
    for key in ours:
        th.testing.assert_close(ours[key], theirs[key], rtol=1e-5, atol=1e-6, msg=key)
