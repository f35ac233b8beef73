"""Reinforcement learning with a replay memory that fits: DQN on CartPole, four replay storages.

    replay.py    ReplayBuffer: one ring index, one interface, bit-identical sampling for every scheme
    storage.py   the schemes: float32 stacks, uint8 stacks, uint8 frames once (dedup), frames on disk
    prefetch.py  BatchPrefetcher: the next batch read on a background thread
    dqn.py       QNetwork and DQN (target network, epsilon-greedy, Huber loss)
    envs.py      CartPole-v1 through Gymnasium, as rendered pixels or as a uint8 state
    train.py     train_cartpole and evaluate

``envs.py`` and ``train.py`` need Gymnasium (``pip install -e ".[apps]"``); importing
``tinymem.rl`` does not import it.
"""
from .dqn import DQN, QNetwork
from .prefetch import BatchPrefetcher
from .replay import Batch, ReplayBuffer, bytes_per_slot, stack_slots
from .storage import SCHEMES

__all__ = ["DQN", "QNetwork", "BatchPrefetcher", "Batch", "ReplayBuffer", "bytes_per_slot", "stack_slots",
           "SCHEMES"]
