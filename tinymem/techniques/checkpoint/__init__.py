"""Gradient checkpointing: keep fewer activations, recompute the rest during backward.

    segments.py  checkpoint, checkpoint_sequential: PyTorch's contract, sqrt(n) segments
    selective.py Policy: keep the outputs of chosen ops (matmul, conv), recompute the rest
    revolve.py   revolve, checkpoint_revolve: the optimal binomial schedule for a fixed slot count
    schedule.py  profile the layers, predict each schedule's peak, choose one under a byte budget
"""
from .revolve import Schedule, binomial_forwards, checkpoint_revolve, repetitions, revolve
from .schedule import Plan, candidate_plans, choose_schedule, predict_revolve, predict_segments, profile_layers
from .segments import CheckpointFunction, checkpoint, checkpoint_sequential, resolve_segments
from .selective import Policy

__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointFunction", "resolve_segments", "revolve",
           "checkpoint_revolve", "binomial_forwards", "repetitions", "Schedule", "profile_layers",
           "predict_segments", "predict_revolve", "Plan", "candidate_plans", "choose_schedule", "Policy"]
