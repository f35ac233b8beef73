"""CartPole through Gymnasium, seen as pixels or as a uint8-quantized state; no display needed.

- :func:`render_cartpole` draws CartPole's state ``(x, x_dot, theta, theta_dot)`` into a small
  grayscale frame with NumPy alone (no pygame, no window): track, cart and pole, as in Atari a
  picture from which position and angle can be read, and velocity from two frames.
- :class:`PixelObservation` is a Gymnasium observation wrapper that returns that frame
  (uint8, ``(height, width)``: 84 x 84 = 7,056 bytes, the size of one Atari frame in DQN).
- :class:`QuantizeObservation` stores the 4 state numbers as 4 uint8 codes with a fixed affine
  map per feature (``techniques/quantization``'s ``quantize``): 4 bytes instead of 16, and
  every code is an exact float32, so a float32 and a uint8 replay buffer hold the same values.

This module imports Gymnasium (the ``apps`` extra); the rest of ``tinymem.rl`` does not.
"""
import gymnasium as gym
import numpy as np

from ..techniques import quantization as Q

# The world CartPole lives in (Gymnasium's cartpole.py): the episode ends when |x| > 2.4 or
# |theta| > 12 degrees; the pole is 1.0 long (half-length 0.5).
WORLD_HALF_WIDTH = 2.4 * 1.2
POLE_LENGTH, POLE_HALF_THICKNESS = 1.0, 0.06
CART_HALF_WIDTH, CART_HALF_HEIGHT = 0.25, 0.12
TRACK, CART, POLE = 64, 160, 255  # gray levels; the background is 0

# Fixed ranges for the uint8 state: position and angle from the termination thresholds (with
# the observation space's margin), velocities from what a balancing policy visits (clamped).
STATE_RANGES = np.array([[-4.8, 4.8], [-4.0, 4.0], [-0.42, 0.42], [-4.0, 4.0]], np.float32)


def render_cartpole(state, height=84, width=84):
    """A uint8 ``(height, width)`` frame of CartPole in ``state`` (x, x_dot, theta, theta_dot).

    The horizontal axis spans x in [-2.88, 2.88] world units; the track is the row a quarter
    from the bottom. Cost: a few NumPy passes over height·width pixels (well under 1 ms at 84²).
    """
    if height < 16 or width < 16:
        raise ValueError(f"render_cartpole needs a frame of at least 16 x 16 pixels, got {height} x {width}")
    x, _, theta, _ = (float(v) for v in state)
    scale = width / (2 * WORLD_HALF_WIDTH)  # pixels per world unit, the same on both axes
    cols = (np.arange(width, dtype=np.float32) + 0.5) / scale - WORLD_HALF_WIDTH
    rows = (height * 0.75 - np.arange(height, dtype=np.float32) - 0.5) / scale  # height above the track
    px, py = np.meshgrid(cols, rows)
    frame = np.zeros((height, width), np.uint8)
    frame[int(height * 0.75)] = TRACK
    frame[(np.abs(px - x) <= CART_HALF_WIDTH) & (np.abs(py - CART_HALF_HEIGHT) <= CART_HALF_HEIGHT)] = CART
    # The pole: pixels within POLE_HALF_THICKNESS of the segment from the axle to the tip.
    ax, ay = x, 2 * CART_HALF_HEIGHT
    dx, dy = POLE_LENGTH * np.sin(theta), POLE_LENGTH * np.cos(theta)
    t = np.clip(((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy), 0.0, 1.0)
    dist2 = (px - ax - t * dx) ** 2 + (py - ay - t * dy) ** 2
    frame[dist2 <= POLE_HALF_THICKNESS ** 2 + 0.25 / scale ** 2] = POLE
    return frame


class PixelObservation(gym.ObservationWrapper):
    """Replace CartPole's state by its rendered grayscale frame (uint8, ``(height, width)``)."""

    def __init__(self, env, height=84, width=84):
        super().__init__(env)
        self.height, self.width = height, width
        self.observation_space = gym.spaces.Box(0, 255, (height, width), np.uint8)

    def observation(self, observation):
        return render_cartpole(observation, self.height, self.width)


def state_qparams():
    """Per-feature (scale, zero_point) of the uint8 state, from :data:`STATE_RANGES`."""
    return Q.qparams_from_minmax(STATE_RANGES[:, 0], STATE_RANGES[:, 1], "per_channel_affine", "quint8", 0, 255)


class QuantizeObservation(gym.ObservationWrapper):
    """CartPole's state as 4 uint8 codes, q = clamp(round(s / scale) + zero_point, 0, 255).

    The round trip errs by at most scale/2 per feature (0.019 in x, 0.0017 rad in theta) inside
    :data:`STATE_RANGES` and clamps outside. ``dequantize(q)`` gives the float state back for
    the network's input.
    """

    def __init__(self, env):
        super().__init__(env)
        self.scale, self.zero_point = state_qparams()
        self.observation_space = gym.spaces.Box(0, 255, (4,), np.uint8)

    def observation(self, observation):
        return Q.quantize(np.asarray(observation, np.float32), self.scale, self.zero_point, "quint8", axis=0)


def make_cartpole(observation="state", height=84, width=84):
    """``CartPole-v1`` (500-step time limit) with ``observation`` one of ``"state"`` (4 float32),
    ``"uint8"`` (:class:`QuantizeObservation`) or ``"pixels"`` (:class:`PixelObservation`)."""
    env = gym.make("CartPole-v1")
    if observation == "state":
        return env
    if observation == "uint8":
        return QuantizeObservation(env)
    if observation == "pixels":
        return PixelObservation(env, height, width)
    raise ValueError(f"unknown observation {observation!r}; choose 'state', 'uint8' or 'pixels'")
