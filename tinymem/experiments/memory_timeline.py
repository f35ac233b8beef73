"""Figure: memory over one training step (the ledger's timeline, stacked by bucket).

An MLP on the digits data, one Adam step: the forward pass piles up activations, backward
turns them into gradients and frees them, the optimizer's first step creates its state.
"""
from .. import data, memory, models, optim, plots, random
from .. import functional as F

NAME = "memory_timeline"
ORDER = 0
FIGURES = ["memory_timeline.png"]


def run(quick=False, device="cpu"):
    random.manual_seed(0)
    x_train, y_train, _, _ = data.load_digits()
    batch = 128 if quick else 512
    width = 256 if quick else 1024
    model = models.MLP([64, width, width, width, 10]).to(device)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    loader = data.DataLoader((x_train, y_train), batch_size=batch, shuffle=True, seed=0, device=device)
    x, y = next(iter(loader))
    with memory.track(device=device) as t:
        memory.mark("forward")
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        del loss
    return {"config": {"sizes": model.sizes, "batch": batch, "optimizer": "Adam"},
            "timeline": t.timeline(), "peak": t.peak(), "peak_by_bucket": t.peak_by_bucket(),
            "peak_delta": t.peak_delta(), "measured_peak": t.measured_peak()}


def plot(records, outdir):
    fig, ax = plots.new_figure(width=7.5)
    cfg = records["config"]
    plots.stacked_timeline(ax, records["timeline"],
                           f"Memory over one training step: MLP {cfg['sizes']}, batch {cfg['batch']}, Adam")
    return [plots.save(fig, records, outdir, FIGURES[0])]
