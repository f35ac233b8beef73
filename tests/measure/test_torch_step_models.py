"""measure_torch_step on models off the common path: buckets that add up to the peak and hold
the bytes derived by hand."""
import pytest

from tinymem.measure.torch_step import measure_torch_step

pytestmark = pytest.mark.torch


def test_the_grad_of_a_parameter_the_optimizer_does_not_update_is_a_gradient_in_flight_first():
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model[1].parameters(), lr=0.1)  # the first layer is trained by nobody, yet has grads
    x = torch.randn(4, 8)

    def step():
        model(x).sum().backward()
        opt.step()
        model.zero_grad()

    r = measure_torch_step(step, model=model, optimizer=opt, inputs=(x,))
    # The peak: the first layer's bias gradient (aten::sum in AddmmBackward0), its weight gradient
    # (32*8 floats) and the gradient of its output (4*32) made beside it, none accumulated yet:
    # all three flow between nodes. The second layer's .grad (32*4 + 4 floats) is accumulated.
    assert (r.op_at_peak, r.node_at_peak) == ("aten::sum", "AddmmBackward0")
    assert r.buckets["in_flight"] == 32 * 4 + 32 * 8 * 4 + 4 * 32 * 4
    assert r.buckets["gradient"] == (32 * 4 + 4) * 4
    assert r.buckets["temporary"] == 4 + 4  # the loss and its seed gradient
    assert sum(r.buckets.values()) == r.peak


@pytest.mark.parametrize("reentrant, recomputed", [(False, "temporary"), (True, "activation")])
def test_checkpoint_recomputes_in_backward_and_only_reentrant_saves_count_as_activations(reentrant, recomputed):
    import torch
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8)

    def step():
        h = model[0](x)  # saved by the checkpointed GELU in forward: an activation either way
        checkpoint(lambda h: model[2](model[1](h)), h, use_reentrant=reentrant).sum().backward()
        opt.step()
        opt.zero_grad()

    r = measure_torch_step(step, model=model, optimizer=opt, inputs=(x,))
    node = "CheckpointFunctionBackward" if reentrant else "AddmmBackward0"
    top = r.top(20)
    # GELU's output (4*64 floats), made again in backward: the non-reentrant checkpoint saves it
    # through its own hooks, which hide the measurement's; the reentrant one reruns a plain forward.
    assert [t["bucket"] for t in top if t["op"] == "aten::gelu"] == [recomputed]
    assert [t["where"] for t in top if t["op"] == "aten::gelu"] == [f"backward: {node}"]
    assert r.buckets["activation"] == 4 * 64 * 4 * (2 if reentrant else 1)
    assert sum(r.buckets.values()) == r.peak
