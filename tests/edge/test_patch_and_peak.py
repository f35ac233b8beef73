"""Layer-by-layer inference peak and patch-based inference: exact outputs, ledger-measured peaks."""
import functools
import gc

import numpy as np
import pytest

import tinymem as tm
from conftest import requires_torch
from tinymem import backend, models, nn
from tinymem.edge.chain import ConvLayer, PoolLayer, chain, run_chain, unet_encoder
from tinymem.edge.patch import patch_inference, tiles, trace_back, whole_and_patch_equal
from tinymem.edge.peak import inference_peak


def small_cnn():
    tm.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 16, 5, padding=2), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU())
    rng = np.random.default_rng(1)
    here = functools.partial(backend.to_device, device=tm.get_default_device())  # where net lives
    for m in net.modules():  # non-trivial running statistics, so folding BatchNorm is tested
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean = here(rng.standard_normal(m.num_features).astype(np.float32))
            m.running_var = here(rng.uniform(0.5, 2, m.num_features).astype(np.float32))
            m.weight.data = here(rng.uniform(0.5, 1.5, m.num_features).astype(np.float32))
    return net.eval()


def test_folding_batchnorm_keeps_the_outputs():
    net = small_cnn()
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    with tm.no_grad():
        expected = net(tm.tensor(x)).numpy()
        got = run_chain(chain(net), tm.tensor(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@requires_torch
def test_chain_matches_pytorch_eval_mode():
    import torch
    net = small_cnn()
    tnet = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, 2, 1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 8, 3, 1, 1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Conv2d(8, 16, 5, 1, 2), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                               torch.nn.Conv2d(16, 16, 3, 2, 1), torch.nn.ReLU()).eval()
    state = net.state_dict()
    tstate = {k: torch.tensor(np.asarray(state[k])) for k in tnet.state_dict() if k in state}
    tnet.load_state_dict(tstate, strict=False)
    x = np.random.default_rng(0).standard_normal((1, 3, 40, 40)).astype(np.float32)
    with tm.no_grad(), torch.no_grad():
        np.testing.assert_allclose(run_chain(chain(net), tm.tensor(x)).numpy(), tnet(torch.tensor(x)).numpy(),
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("split", [1, 2, 3, 4])
@pytest.mark.parametrize("grid", [1, 3, 4])
def test_patch_outputs_equal_whole_layer_outputs_exactly(split, grid):
    x = np.random.default_rng(split).standard_normal((1, 3, 45, 38)).astype(np.float32)  # odd sizes
    assert whole_and_patch_equal(small_cnn(), x, split, grid)


def test_unet_encoder_patch_equals_whole_and_lowers_the_peak():
    tm.manual_seed(0)
    enc = unet_encoder(models.UNet(1, 4, base=4, depth=3))
    x = np.random.default_rng(0).standard_normal((1, 1, 64, 64)).astype(np.float32)
    whole = inference_peak(enc, x.shape, x)
    patch = patch_inference(enc, x, split=6, grid=4)
    assert np.array_equal(whole["output"], patch["output"])
    assert patch["peak"] < whole["peak"] / 2
    assert patch["macs_patch"] > patch["macs_whole"]  # halos are computed more than once


def test_inference_peak_is_input_plus_output_plus_workspace_from_the_ledger():
    layer = ConvLayer(np.ones((4, 2, 3, 3), np.float32), np.zeros(4, np.float32), 1, 1)
    r = inference_peak([layer], (1, 2, 16, 16))
    row = r["layers"][0]
    assert row["input"] == 2 * 16 * 16 * 4 and row["output"] == 4 * 16 * 16 * 4
    # a direct convolution: one output-sized product, plus the zero-padded input copy (2 x 18 x 18)
    assert row["workspace"] == 4 * 16 * 16 * 4 + 2 * 18 * 18 * 4
    assert r["peak"] == row["input"] + row["output"] + row["workspace"]
    pool = inference_peak([PoolLayer(2)], (1, 3, 8, 8))["layers"][0]
    assert pool["output"] == 3 * 4 * 4 * 4 and pool["peak"] >= pool["input"] + pool["output"]


def test_trace_back_follows_kernel_stride_and_padding():
    # One 3x3 conv, padding 1, stride 2 on 10 rows -> 5 rows; output rows [2, 4) read rows 3..7.
    conv = ConvLayer(np.zeros((1, 1, 3, 3), np.float32), np.zeros(1, np.float32), 2, 1)
    assert trace_back((2, 4), [conv], [10, 5]) == [(3, 8, 0, 0)]
    assert trace_back((0, 1), [conv], [10, 5]) == [(0, 2, 1, 0)]  # one row of zero padding on top
    assert tiles(10, 3) == [(0, 3), (3, 7), (7, 10)]


def test_chain_rejects_what_it_cannot_place():
    with pytest.raises(TypeError, match="Linear"):
        chain(nn.Sequential(nn.Conv2d(1, 2, 3), nn.Linear(2, 2)))
    with pytest.raises(ValueError, match="one input"):
        patch_inference(chain(small_cnn()), np.zeros((2, 3, 8, 8), np.float32), 1)
    one = np.zeros((1, 3, 8, 8), np.float32)
    for split, grid in ((0, 4), (99, 4)):  # an empty stage used to fail with IndexError
        with pytest.raises(ValueError, match="split must be 1.."):
            patch_inference(chain(small_cnn()), one, split, grid)
    with pytest.raises(ValueError, match="too small for layer 2"):  # the output was None
        patch_inference(chain(small_cnn()), np.zeros((1, 3, 1, 1), np.float32), 3)
    for grid in (0, -1):
        with pytest.raises(ValueError, match="grid must be a positive integer"):
            patch_inference(chain(small_cnn()), one, 1, grid)


def test_chain_refuses_average_pooling_instead_of_running_it_as_a_max():
    # AvgPool2d subclasses MaxPool2d: an isinstance test let it through as a max pool.
    net = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.AvgPool2d(2)).eval()
    with pytest.raises(TypeError, match="cannot place a AvgPool2d"):
        chain(net)



@pytest.mark.parametrize("split", [1, 2, 4])
def test_patch_peak_is_what_a_tracking_window_around_the_call_sees(split):
    """The stage output was held twice during the layers after the stage (patch_inference's
    array and inference_peak's copy of it): a window around the call saw 168,064 B where the
    report said 135,296 B at split 1."""
    layers = chain(small_cnn())
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    gc.collect()  # the model chain() read is garbage: its weights must not be freed in the window
    with tm.memory.track(measure=False) as t:
        r = patch_inference(layers, x, split, 4)
    assert r["peak"] == t.peak_delta() > 0


def test_chain_refuses_a_non_square_kernel_instead_of_building_a_square_one():
    """Conv2d(3, 4, (3, 5)) became a 3x3 layer whose output was (1, 4, 6, 8), not (1, 4, 6, 6)."""
    with pytest.raises(ValueError, match="square kernel"):
        chain(nn.Sequential(nn.Conv2d(3, 4, (3, 5))))
    with pytest.raises(ValueError, match="square kernel"):
        ConvLayer(np.zeros((4, 3, 3, 5), np.float32), np.zeros(4, np.float32), 1, 0)


class CollectingConv(ConvLayer):
    """A layer during whose window the collector runs, as it may at any allocation."""

    def __call__(self, x, padding=None):
        gc.collect()
        return super().__call__(x, padding)


def test_garbage_collected_during_a_layer_is_not_read_as_negative_workspace():
    """An array freed by the collector inside a layer's window lowered the peak read there: the
    committed edge records held a layer with -20,480 B of workspace."""
    class Cycle:
        pass

    layer = CollectingConv(np.ones((4, 2, 3, 3), np.float32), np.zeros(4, np.float32), 1, 1)
    gc.disable()  # the garbage waits for the collection inside the layer
    try:
        garbage = Cycle()
        garbage.me, garbage.block = garbage, tm.memory.register(np.ones(100_000, np.float32), "workspace")
        del garbage
        row = inference_peak([layer], (1, 2, 16, 16))["layers"][0]
    finally:
        gc.enable()
    assert row["workspace"] == 4 * 16 * 16 * 4 + 2 * 18 * 18 * 4  # the product and the padded copy
