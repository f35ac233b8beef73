"""DQN (Mnih et al. 2015): a Q-network, its target network, epsilon-greedy acting, Huber loss.

One gradient step on a replay batch (obs, a, r, next_obs, done):

    y    = r + gamma · (1 - done) · max_a' Q_target(next_obs, a')     (no gradient)
    loss = smooth_l1(Q(obs, a), y)                                    (Huber, delta 1)

The target network is a copy of the online network, refreshed every ``target_update`` steps, so
the regression target does not move with every step; the Huber loss keeps a large TD error
from giving a large gradient. Acting is epsilon-greedy: a random action with probability
epsilon (decayed linearly from 1 to ``final_epsilon``), else argmax Q.

Memory (``device``): two copies of the network's parameters (online and target, 4 bytes per
weight each), Adam's 8 bytes per weight, and per step the activations of one batch. The replay
buffer holds the rest, in host RAM or on disk (``replay.py``): for Atari it dwarfs all of this.
"""
import numpy as np

from .. import backend
from .. import functional as F
from .. import models, nn, optim
from ..autograd import Tensor, no_grad
from .replay import Batch


class QNetwork(nn.Module):
    """An MLP from a flattened observation stack to one Q-value per action.

    ``input_scale`` and ``input_offset`` (broadcast against one frame) map stored values to the
    network's input, x = stored · scale + offset: 1/255 for pixels, the dequantization for a
    uint8 state, 1 and 0 for a float32 state. They are constants, not parameters.
    """

    def __init__(self, obs_shape, n_actions, hidden=(256, 256), input_scale=1.0, input_offset=0.0):
        super().__init__()
        self.obs_shape = tuple(obs_shape)
        self.mlp = models.MLP([int(np.prod(obs_shape)), *hidden, n_actions])
        frame = self.obs_shape[1:]
        self.input_scale = np.broadcast_to(np.asarray(input_scale, np.float32), frame).reshape(-1)
        self.input_offset = np.broadcast_to(np.asarray(input_offset, np.float32), frame).reshape(-1)

    def preprocess(self, obs):
        """Stored observations (B, k, *frame) as the network's float32 input (B, k·F)."""
        obs = np.asarray(obs, np.float32).reshape(len(obs), self.obs_shape[0], -1)
        return (obs * self.input_scale + self.input_offset).reshape(len(obs), -1)

    def forward(self, obs):
        return self.mlp(Tensor(self.preprocess(obs)))


class DQN:
    """The learner: ``act(obs_stack, epsilon, rng)``, ``update(batch)``, ``sync_target()``.

    Defaults are RL Zoo's tuned DQN for CartPole-v1 (Raffin et al.): Adam at 2.3e-3, gamma
    0.99, gradient norm clipped at 10.
    """

    def __init__(self, obs_shape, n_actions, hidden=(256, 256), lr=2.3e-3, gamma=0.99, max_grad_norm=10.0,
                 input_scale=1.0, input_offset=0.0):
        self.n_actions, self.gamma, self.max_grad_norm = n_actions, gamma, max_grad_norm
        self.online = QNetwork(obs_shape, n_actions, hidden, input_scale, input_offset)
        self.target = QNetwork(obs_shape, n_actions, hidden, input_scale, input_offset)
        self.sync_target()
        self.optimizer = optim.Adam(self.online.parameters(), lr=lr)

    def sync_target(self):
        """Copy the online network's weights into the target network."""
        self.target.load_state_dict(self.online.state_dict())

    def greedy(self, obs):
        """argmax_a Q(obs, a) for a batch of observation stacks (int64 array)."""
        with no_grad():
            return self.online(obs).data.argmax(axis=1)

    def act(self, obs_stack, epsilon, rng):
        """epsilon-greedy action for one observation stack (k, *frame)."""
        if rng.random() < epsilon:
            return int(rng.integers(self.n_actions))
        return int(self.greedy(obs_stack[None])[0])

    def _check_batch(self, batch):
        """Refuse what would train silently on the wrong thing: an action index out of range
        (-1 picks the last Q-value) or a reward that is not finite (every weight turns NaN)."""
        if not all(hasattr(batch, f) for f in Batch._fields):
            raise TypeError(f"DQN.update takes a replay Batch (obs, action, reward, next_obs, done), got {batch!r}")
        action = np.asarray(batch.action)
        if action.dtype.kind not in "iu":
            raise TypeError(f"DQN.update: actions must be integers, got dtype {action.dtype}")
        bad = action[(action < 0) | (action >= self.n_actions)]
        if bad.size:
            raise ValueError(f"DQN.update: action {bad[0]} is outside [0, {self.n_actions}) for a "
                             f"network with {self.n_actions} outputs")
        if not np.isfinite(batch.reward).all():
            raise ValueError("DQN.update: the batch holds a reward that is not finite (NaN or inf); "
                             "one such update would make every weight NaN")

    def update(self, batch):
        """One gradient step on a replay :class:`~tinymem.rl.replay.Batch`; returns the loss."""
        self._check_batch(batch)
        with no_grad():
            next_q = self.target(batch.next_obs).data.max(axis=1)
        # The replay batch is on the host; the network's outputs are on its device.
        device = backend.device_of(next_q)
        reward, done = backend.to_device(batch.reward, device), backend.to_device(batch.done, device)
        target = (reward + self.gamma * (1.0 - done) * next_q).astype(np.float32)
        rows = backend.array_module(device).arange(len(batch.action))
        q = self.online(batch.obs)[rows, backend.to_device(batch.action, device)]
        loss = F.smooth_l1_loss(q, Tensor(target))
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.online.parameters(), self.max_grad_norm)
        self.optimizer.step()
        return float(loss.data)
