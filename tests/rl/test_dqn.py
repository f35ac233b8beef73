"""DQN: the TD target, the Huber step against PyTorch, and learning that the buffer cannot change."""
import numpy as np
import pytest

from conftest import requires_torch
from tinymem.rl import DQN, Batch

gym = pytest.importorskip("gymnasium")
from tinymem.rl import envs  # noqa: E402  (needs gymnasium)
from tinymem.rl.train import train_cartpole  # noqa: E402


def _batch(rng, n=32, k=1):
    return Batch(rng.standard_normal((n, k, 4)).astype(np.float32), rng.integers(0, 2, n),
                 rng.standard_normal(n).astype(np.float32), rng.standard_normal((n, k, 4)).astype(np.float32),
                 (rng.random(n) < 0.3).astype(np.float32))


@requires_torch
def test_one_update_matches_a_pytorch_dqn_step():
    import torch
    rng = np.random.default_rng(0)
    agent = DQN((1, 4), 2, hidden=(16,), lr=1e-2, gamma=0.9, max_grad_norm=0.5)
    agent.target.mlp[0].weight.data = agent.target.mlp[0].weight.data * 0.5  # target differs from online
    batch = _batch(rng)
    state, target_state = agent.online.state_dict(), agent.target.state_dict()

    def net(s):
        t = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        with torch.no_grad():
            for (name, p) in t.named_parameters():
                p.copy_(torch.tensor(s["mlp." + name]))
        return t

    online, target = net(state), net(target_state)
    opt = torch.optim.Adam(online.parameters(), lr=1e-2)
    obs, nxt = torch.tensor(batch.obs[:, 0]), torch.tensor(batch.next_obs[:, 0])
    with torch.no_grad():
        y = torch.tensor(batch.reward) + 0.9 * (1 - torch.tensor(batch.done)) * target(nxt).max(1).values
    q = online(obs)[torch.arange(32), torch.tensor(batch.action)]
    loss = torch.nn.functional.smooth_l1_loss(q, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(online.parameters(), 0.5)
    opt.step()
    got = agent.update(batch)
    assert got == pytest.approx(loss.item(), rel=1e-5)
    for name, p in online.named_parameters():
        np.testing.assert_allclose(agent.online.state_dict()["mlp." + name], p.detach().numpy(), rtol=1e-4, atol=1e-6)


def test_terminal_steps_do_not_bootstrap():
    rng = np.random.default_rng(1)
    agent = DQN((1, 4), 2, hidden=(8,), lr=2e-2, gamma=0.99)
    batch = _batch(rng, 8)._replace(done=np.ones(8, np.float32))
    for _ in range(300):  # every target is the reward alone: Q(obs, a) learns r
        agent.update(batch)
    q = agent.online(batch.obs).numpy()[np.arange(8), batch.action]
    np.testing.assert_allclose(q, batch.reward, atol=0.05)


def test_epsilon_greedy_explores_at_rate_epsilon():
    agent = DQN((1, 4), 2, hidden=(8,))
    obs = np.zeros((1, 4), np.float32)
    greedy = int(agent.greedy(obs[None])[0])
    rng = np.random.default_rng(0)
    other = np.mean([agent.act(obs, 0.4, rng) != greedy for _ in range(4000)])
    assert other == pytest.approx(0.2, abs=0.03)  # half of the random actions are the greedy one
    assert all(agent.act(obs, 0.0, rng) == greedy for _ in range(50))


def test_compact_and_naive_buffers_learn_exactly_the_same(tmp_path):
    """On the same uint8 observations, float32 stacks and frames-once on disk give one run."""
    short = dict(total_steps=600, learning_starts=200, train_freq=50, gradient_steps=4, batch_size=16,
                 hidden=(16,), eval_every=300, eval_episodes=2, final_eval_episodes=2)
    runs = [train_cartpole(storage, "uint8", seed=3, directory=tmp_path, **short) for storage in ("float32", "disk")]
    assert runs[0]["updates"] == runs[1]["updates"] > 0
    assert runs[0]["episodes"] == runs[1]["episodes"] and runs[0]["evals"] == runs[1]["evals"]
    assert runs[0]["final"] == runs[1]["final"]
    # 100,000 slots: float32 keeps 2 x 4 floats per slot, disk 4 bytes; both keep 13 of index
    assert runs[0]["buffer_bytes"] == {"host": 100_000 * (32 + 13), "disk": 0}
    assert runs[1]["buffer_bytes"] == {"host": 100_000 * 13, "disk": 100_000 * 4}


def test_quantized_state_round_trip_within_half_a_step():
    scale, zero_point = envs.state_qparams()
    rng = np.random.default_rng(0)
    lo, hi = envs.STATE_RANGES[:, 0], envs.STATE_RANGES[:, 1]
    s = rng.uniform(lo, hi, (1000, 4)).astype(np.float32)
    q = np.stack([envs.QuantizeObservation.observation(_Wrap(), row) for row in s])
    assert q.dtype == np.uint8
    back = scale * (q.astype(np.float32) - zero_point)
    assert np.all(np.abs(back - s) <= scale / 2 + 1e-6)


class _Wrap:
    scale, zero_point = envs.state_qparams()


def test_pixels_show_the_cart_where_it_is_and_the_pole_as_it_leans():
    left, right = envs.render_cartpole([-1.0, 0, 0, 0]), envs.render_cartpole([1.0, 0, 0, 0])
    cols = lambda f: np.nonzero(f == envs.CART)[1].mean()  # noqa: E731
    scale = 84 / (2 * envs.WORLD_HALF_WIDTH)
    assert cols(right) - cols(left) == pytest.approx(2.0 * scale, abs=1.0)
    lean = envs.render_cartpole([0, 0, 0.2, 0])
    upright = envs.render_cartpole([0, 0, 0.0, 0])
    tip = lambda f: np.nonzero(f == envs.POLE)[1][np.argmin(np.nonzero(f == envs.POLE)[0])]  # noqa: E731
    assert tip(lean) > tip(upright)  # positive theta leans right, as in Gymnasium
    env = envs.make_cartpole("pixels", 40, 60)
    frame, _ = env.reset(seed=0)
    assert frame.shape == (40, 60) and frame.dtype == np.uint8 and env.observation_space.contains(frame)
    with pytest.raises(ValueError, match="unknown observation"):
        envs.make_cartpole("rgb")


@pytest.mark.slow
def test_dqn_solves_cartpole_with_the_compact_buffer():
    result = train_cartpole("dedup", "uint8", seed=0)
    assert result["final"]["mean"] >= 475, result["final"]
