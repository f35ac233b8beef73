"""U-Net, phantoms and Dice: shapes, exact masks at every resolution, checkpointed blocks
bit-identical to the plain run, BatchNorm statistics updated once, no leaks."""
import gc

import numpy as np
import pytest

import tinymem as tm
from tinymem import memory, models
from tinymem.data.phantoms import CLASSES, make_phantoms, phantom
from tinymem.experiments import workload_resolution as W
from tinymem.techniques.checkpoint import checkpoint


def test_phantom_is_the_same_object_at_every_resolution():
    _, small = phantom(3, 64)
    _, large = phantom(3, 256)
    # Subsampling the 256 px mask at the 64 px pixel centres disagrees only on boundary pixels.
    agree = (large[1::4, 1::4] == small).mean()
    assert agree > 0.97
    assert set(np.unique(small)) <= set(range(len(CLASSES))) and len(np.unique(small)) == len(CLASSES)


def test_phantoms_are_reproducible_and_scalable():
    a, la = make_phantoms(2, 64, seed=5)
    b, lb = make_phantoms(2, 64, seed=5)
    assert np.array_equal(a, b) and np.array_equal(la, lb)
    assert a.shape == (2, 1, 64, 64) and a.dtype == np.float32 and la.dtype == np.int64
    image, labels = phantom(0, 1024)
    assert image.shape == labels.shape == (1024, 1024)
    with pytest.raises(ValueError, match="resolution"):
        phantom(0, 4)


def test_dice_score():
    t = np.array([[0, 1, 1, 2]])
    assert models.dice_score(t, t, 3) == 1.0
    p = np.array([[0, 1, 0, 2]])
    # class 1: 2·1 / (1 + 2) = 2/3; class 2: 1
    assert models.dice_score(p, t, 3) == pytest.approx((2 / 3 + 1) / 2)


def test_unet_shapes_and_errors():
    net = models.UNet(base=2, depth=3)
    assert net(tm.randn(2, 1, 16, 8)).shape == (2, 4, 16, 8)
    with pytest.raises(ValueError, match="divisible by 4"):
        net(tm.randn(1, 1, 10, 8))


def _grads_and_stats(checkpointed):
    tm.manual_seed(0)
    net = models.UNet(base=2, depth=3).to(dtype="float64")
    if checkpointed:
        net.checkpoint_fn = checkpoint
    images, labels = make_phantoms(2, 16)
    loss = models.segmentation_loss(net(tm.tensor(images.astype(np.float64))), tm.tensor(labels))
    loss.backward()
    return [p.grad.numpy() for p in net.parameters()], net.state_dict()


def test_checkpointed_blocks_are_bit_identical_and_update_batchnorm_once():
    plain_grads, plain_state = _grads_and_stats(False)
    ckpt_grads, ckpt_state = _grads_and_stats(True)
    for a, b in zip(plain_grads, ckpt_grads):
        assert np.array_equal(a, b)
    for key in plain_state:
        assert np.array_equal(plain_state[key], ckpt_state[key]), key
    assert ckpt_state["inc.1.num_batches_tracked"] == 1


def test_training_step_leaves_no_activations_or_tensors():
    net = models.UNet(base=2, depth=2)
    images, labels = make_phantoms(2, 8)
    gc.collect()
    gc.disable()
    try:
        loss = models.segmentation_loss(net(tm.tensor(images)), tm.tensor(labels))
        loss.backward()
        del loss
        assert memory.live_bytes("activation") == 0, memory.format_table(memory.LEDGER.by_bucket())
        graph = [o for o in gc.get_objects() if issubclass(type(o), tm.Function)]
        assert graph == []
    finally:
        gc.enable()


def test_resolution_sweep_records():
    rows = W.sweep([16], base=2, depth=2, device="cpu", repeats=1)
    by = {r["config"]: r for r in rows}
    assert set(by) == set(W.CONFIGS)
    assert by["checkpoint"]["activation_peak"] < by["float32"]["activation_peak"]
    assert by["float16"]["activation_peak"] < 0.6 * by["float32"]["activation_peak"]
    assert all(r["step_seconds"] > 0 and r["measured_peak"] > 0 for r in rows)
