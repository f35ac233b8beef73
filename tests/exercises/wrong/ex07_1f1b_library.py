"""Wrong answer to 07.5: the library's schedule called instead of built."""
from tinymem.distributed import pipeline

TARGET = "one_f_one_b"


def one_f_one_b(stage, stages, micro_batches):
    return pipeline.schedule_order("1f1b", stage, stages, micro_batches)
