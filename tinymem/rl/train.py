"""Training and evaluating a DQN on CartPole-v1 with any replay storage scheme.

BLAS runs on one thread (``measure.timing.one_blas_thread``): the network's matrices are small.

:func:`train_cartpole` runs the standard loop: act epsilon-greedily, store the step in a
:class:`~tinymem.rl.replay.ReplayBuffer`, every ``train_freq`` steps take ``gradient_steps``
gradient steps on sampled batches, refresh the target network every ``target_update`` steps,
and evaluate the greedy policy every ``eval_every`` steps (keeping the best weights, as RL Zoo's
evaluation callback does). At the end the kept weights play ``final_eval_episodes`` fresh
episodes: CartPole-v1 counts as solved at a mean return of 475 over 100 episodes (500 is the
time limit).

:func:`evaluate` plays many episodes at once: one environment per episode, one batched forward
per time step, so 100 episodes cost 500 forwards rather than 50,000.
"""
import time

import numpy as np

from .. import random
from ..measure.timing import one_blas_thread
from . import envs
from .dqn import DQN
from .replay import ReplayBuffer

# RL Zoo's tuned hyperparameters for DQN on CartPole-v1.
DEFAULTS = dict(total_steps=50_000, buffer_size=100_000, learning_starts=1_000, batch_size=64,
                train_freq=256, gradient_steps=128, target_update=10, exploration_steps=8_000,
                final_epsilon=0.04, lr=2.3e-3, gamma=0.99, hidden=(256, 256), eval_every=2_500,
                eval_episodes=10, final_eval_episodes=100)


def observation_spec(observation, height=84, width=84):
    """(frame shape, frame dtype, frame_stack, input scale, input offset) for a CartPole observation."""
    if observation == "state":
        return (4,), "float32", 1, 1.0, 0.0
    if observation == "uint8":
        scale, zero_point = envs.state_qparams()
        return (4,), "uint8", 1, scale, -zero_point * scale
    if observation == "pixels":
        return (height, width), "uint8", 4, 1.0 / 255, 0.0
    raise ValueError(f"unknown observation {observation!r}; choose 'state', 'uint8' or 'pixels'")


def evaluate(agent, observation, seeds, frame_stack=1):
    """Returns of the greedy policy on one episode per seed, all episodes stepped together."""
    games = [envs.make_cartpole(observation) for _ in seeds]
    stacks = []
    for env, seed in zip(games, seeds):
        first, _ = env.reset(seed=int(seed))
        stacks.append(np.repeat(np.asarray(first)[None], frame_stack, axis=0))
    returns = np.zeros(len(games))
    alive = list(range(len(games)))
    while alive:
        actions = agent.greedy(np.stack([stacks[i] for i in alive]))
        still = []
        for i, action in zip(alive, actions):
            frame, reward, terminated, truncated, _ = games[i].step(int(action))
            returns[i] += reward
            stacks[i] = np.concatenate([stacks[i][1:], np.asarray(frame)[None]])
            if not (terminated or truncated):
                still.append(i)
        alive = still
    for env in games:
        env.close()
    return returns


def train_cartpole(storage="dedup", observation="uint8", seed=0, directory=None, **overrides):
    """Train a DQN on CartPole-v1 with replay ``storage``; returns JSON-able records.

    Records: ``episodes`` (env step at each episode's end, its return), ``evals`` (env step,
    mean greedy return), ``final`` (the kept weights over ``final_eval_episodes`` new episodes),
    ``buffer_bytes`` (host and disk), ``updates`` and ``seconds``.
    """
    unknown = set(overrides) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"train_cartpole: unknown settings {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    cfg = dict(DEFAULTS, **overrides)
    random.manual_seed(seed)
    rng = np.random.default_rng(seed)
    shape, dtype, k, scale, offset = observation_spec(observation)
    env = envs.make_cartpole(observation)
    agent = DQN((k,) + shape, 2, cfg["hidden"], cfg["lr"], cfg["gamma"], input_scale=scale, input_offset=offset)
    records = {"storage": storage, "observation": observation, "seed": seed, "episodes": [], "evals": []}
    best, best_state, updates, start = -np.inf, agent.online.state_dict(), 0, time.perf_counter()
    with one_blas_thread(), ReplayBuffer(cfg["buffer_size"], shape, k, storage, dtype, directory,
                                         n_actions=agent.n_actions) as buffer:
        frame, _ = env.reset(seed=seed)
        buffer.start_episode(frame)
        episode_return = 0.0
        for step in range(1, cfg["total_steps"] + 1):
            epsilon = max(cfg["final_epsilon"], 1.0 - (1.0 - cfg["final_epsilon"]) * step / cfg["exploration_steps"])
            action = agent.act(buffer.window[1:], epsilon, rng)
            frame, reward, terminated, truncated, _ = env.step(action)
            buffer.add(action, reward, frame, terminated)
            episode_return += reward
            if terminated or truncated:
                records["episodes"].append((step, episode_return))
                frame, _ = env.reset()
                buffer.start_episode(frame)
                episode_return = 0.0
            if step >= cfg["learning_starts"] and step % cfg["train_freq"] == 0:
                for _ in range(cfg["gradient_steps"]):
                    agent.update(buffer.sample(cfg["batch_size"], rng))
                    updates += 1
            if step % cfg["target_update"] == 0:
                agent.sync_target()
            if step % cfg["eval_every"] == 0:
                seeds = 10_000 + 1_000 * seed + np.arange(cfg["eval_episodes"])
                mean = float(evaluate(agent, observation, seeds, k).mean())
                records["evals"].append((step, mean))
                if mean >= best:
                    best, best_state = mean, agent.online.state_dict()
        records["buffer_bytes"] = buffer.nbytes
        env.close()
        agent.online.load_state_dict(best_state)
        final = evaluate(agent, observation, 1_000_000 + 1_000 * seed + np.arange(cfg["final_eval_episodes"]), k)
    records.update(final={"mean": float(final.mean()), "std": float(final.std()), "min": float(final.min()),
                          "episodes": len(final), "kept_eval": float(best)},
                   updates=updates, seconds=time.perf_counter() - start,
                   config={key: (list(v) if isinstance(v, tuple) else v) for key, v in cfg.items()})
    return records
