"""Figure: memory over two training steps (the ledger's timeline, stacked by bucket).

An MLP on the digits data, two Adam steps: the forward pass piles up activations, backward
turns them into gradients and frees them, the optimizer's first step creates its state (2 floats
per parameter), which the second step finds already there from its first byte. The step's peak
is in the update, where the state, the gradients and the update's temporaries live together.
Beside the PNG, ``memory_timeline.html``: the same window as the offline page (hover names each
array, a click lists what is live), drawn from the page's numbers kept in the records.
"""
import os

from .. import data, memory, models, optim, plots, random
from .. import functional as F
from ..measure.claims import Claim
from ..memory import page

NAME = "memory_timeline"
ORDER = 0
FIGURES = ["memory_timeline.png", "memory_timeline.html"]


def run(quick=False, device="cpu"):
    random.manual_seed(0)
    x_train, y_train, _, _ = data.load_digits()
    batch = 128 if quick else 512
    width = 256 if quick else 1024
    model = models.MLP([64, width, width, width, 10]).to(device)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    loader = data.DataLoader((x_train, y_train), batch_size=batch, shuffle=True, seed=0, device=device)
    batches = iter(loader)
    with memory.track(device=device) as t:
        for step in (1, 2):
            x, y = next(batches)
            opt.zero_grad()  # frees the last step's gradients (set to None, as PyTorch does)
            memory.mark(f"step {step}: forward")
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            del loss
    return {"config": {"sizes": model.sizes, "batch": batch, "optimizer": "Adam", "steps": 2},
            "page": page.data(t, f"two Adam steps, MLP {model.sizes}, batch {batch}"),
            "parameter_bytes": sum(p.nbytes for p in model.parameters()),
            "timeline": t.timeline(), "peak": t.peak(), "peak_by_bucket": t.peak_by_bucket(),
            "peak_delta": t.peak_delta(), "measured_peak": t.measured_peak()}


def phases(timeline):
    """``[(label, [events])]``: the events between one mark and the next."""
    out = []
    for e in timeline:
        if e["kind"] == "mark":
            out.append((e["label"], []))
        elif out:
            out[-1][1].append(e)
    return out


def _live(events, bucket):
    return [e["live"][bucket] for e in events]


def _peak_phase(r):
    """The phase (its mark's label) in which the total device bytes are highest."""
    best = max(((sum(e["live"].values()), k, label) for k, (label, events) in enumerate(phases(r["timeline"]))
                for e in events))
    return best[2]


def _activations_at_backward(r):
    """Activation bytes when backward starts, against the most they ever were."""
    start = next(e for e in r["timeline"] if e["kind"] == "mark" and e["label"] == "backward")
    return start["live"]["activation"], max(_live([e for e in r["timeline"] if e["kind"] != "mark"], "activation"))


def _second_forward_state(r):
    events = dict(phases(r["timeline"]))["step 2: forward"]
    return min(_live(events, "optimizer")) / r["parameter_bytes"]


CLAIMS = [
    Claim("activations_peak_when_backward_starts",
          "the forward pass piles up activations: they are at their most when backward starts",
          lambda r: (lambda now, most: (now / most, now == most > 0))(*_activations_at_backward(r))),
    Claim("backward_frees_activations",
          "backward frees every saved activation: 0 activation bytes at the update of each step",
          lambda r: (lambda v: (v, v == 0))(max(e["live"]["activation"] for e in r["timeline"]
                                                if e["kind"] == "mark" and e["label"] == "optimizer"))),
    Claim("adam_state_two_floats", "Adam's state is 2 floats per parameter (optimizer bytes / parameter bytes = 2)",
          lambda r: (lambda v: (v, v == 2))(r["peak_by_bucket"]["optimizer"] / r["parameter_bytes"])),
    Claim("state_persists", "in the second step Adam's state is there from the first byte of the forward",
          lambda r: (lambda v: (v, v == 2))(_second_forward_state(r))),
    Claim("peak_in_update", "the peak of a step is in the optimizer's update, not in forward or backward",
          lambda r: (lambda label: (label, label == "optimizer"))(_peak_phase(r))),
]


def plot(records, outdir):
    fig, ax = plots.new_figure(width=8.0, height=4.4)
    cfg = records["config"]
    plots.stacked_timeline(ax, records["timeline"], f"Two training steps: MLP {cfg['sizes']}, batch {cfg['batch']}, "
                           f"{cfg['optimizer']}", ylabel=f"{plots.device_label(records)} memory (MiB)")
    png = plots.save(fig, records, outdir, FIGURES[0],
                     note="What to see: activations pile up in forward and are freed in backward; Adam's "
                          "state (green) appears in the first update and stays for the second step; the peak "
                          "is in the update.")
    html = os.path.join(outdir, FIGURES[1])
    page.write(records["page"], html)
    return [png, html]
