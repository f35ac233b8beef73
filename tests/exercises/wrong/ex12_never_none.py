"""Wrong on purpose (exercise 12.2): no 'never fits' case: when the fixed cost fills a GPU it still
returns a count."""

TARGET = "fewest_gpus"


def fewest_gpus(params, bytes_per_param, fixed_bytes, gpu_memory):
    return max(1, -(-bytes_per_param * params // max(gpu_memory - fixed_bytes, 1)))
