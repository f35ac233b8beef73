"""Wrong on purpose (exercise 12.2): floor + 1 for the ceiling: one GPU too many when the shards
fill the GPUs exactly."""
import math

TARGET = "fewest_gpus"


def fewest_gpus(params, bytes_per_param, fixed_bytes, gpu_memory):
    room = gpu_memory - fixed_bytes
    return None if room <= 0 else math.floor(bytes_per_param * params / room) + 1
