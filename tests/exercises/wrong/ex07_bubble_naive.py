"""Wrong answer to 07.4: idle slots over busy slots, (S-1)/M, instead of over all slots."""
TARGET = "bubble_fraction"


def bubble_fraction(stages, micro_batches):
    return (stages - 1) / micro_batches
