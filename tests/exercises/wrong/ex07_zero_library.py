"""Wrong answer to 07.1: the library's calculator called instead of the arithmetic."""
from tinymem.distributed import calculator

TARGET = "zero_bytes_per_device"


def zero_bytes_per_device(params, world_size, stage):
    return calculator.model_state_bytes(params, world_size, calculator.STRATEGIES[stage])["total"]
