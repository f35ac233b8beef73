"""Wrong on purpose (exercise 12.2): the floor of the GPU count, so the shards overflow each GPU."""
import math

TARGET = "fewest_gpus"


def fewest_gpus(params, bytes_per_param, fixed_bytes, gpu_memory):
    room = gpu_memory - fixed_bytes
    return None if room <= 0 else max(1, math.floor(bytes_per_param * params / room))
