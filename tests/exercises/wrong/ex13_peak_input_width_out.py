"""13.4b, the input made as wide as the first layer's output rather than its input."""


def qlora_step_peak(layers, r, batch, budget):
    import tinymem as tm
    import tinymem.functional as F
    from tinymem import memory, nn, optim
    from tinymem.techniques.lora import apply_qlora, trainable_parameters

    tm.manual_seed(0)
    parts = []
    for d_in, d_out in layers:
        parts += [nn.Linear(d_in, d_out), nn.GELU()]
    model = nn.Sequential(*parts[:-1])
    del parts
    apply_qlora(model, r, alpha=2 * r)
    opt = optim.Adam(trainable_parameters(model), lr=1e-3)
    x = tm.randn(batch, layers[0][1])

    def step():
        opt.zero_grad()
        F.mse_loss(model(x), x).backward()
        opt.step()
    step()
    with memory.track(budget=budget) as t:
        step()
    return t.peak()
