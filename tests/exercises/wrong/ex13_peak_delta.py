"""13.4b, the growth above entry (peak_delta) instead of the device peak: the weights are left out."""


def qlora_step_peak(layers, r, batch, budget):
    from tinymem import memory

    step = solution._training_step(layers, r, batch)  # noqa: F821 (the reference answers)
    step()
    with memory.track(budget=budget) as t:
        step()
    return t.peak_delta()
