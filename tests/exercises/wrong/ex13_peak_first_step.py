"""13.4b, the first step measured: Adam's state does not exist yet when it starts."""


def qlora_step_peak(layers, r, batch, budget):
    from tinymem import memory

    step = solution._training_step(layers, r, batch)  # noqa: F821 (the reference answers)
    with memory.track(budget=budget) as t:
        step()
    return t.peak()
