"""Inputs that used to end in a bare exception from inside Python or NumPy, or were accepted and
broke a later call, and are now refused with a message naming the argument (GradScaler's are in
tests/techniques/precision/test_grad_scaler_state.py, clip_grad_norm_'s in tests/nn/test_utils.py,
embedding_bag's in tests/nn/test_multihead_and_bags.py). The comment on each case says what
happened before. Everything is built inside the call, not at import."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import nn
from tinymem.planner import conventions
from tinymem.techniques.lora import LoRALinear
from tinymem.techniques.lora.nf4 import LEVELS, dequantize_nf4, quantize_nf4


def x3():
    return tm.tensor(np.ones(3, np.float32))


def codes():
    return quantize_nf4(np.linspace(-1, 1, 100, dtype=np.float32))


def deepspeed(**kw):
    return lambda: conventions.deepspeed_estimate(**dict({"stage": 2, "total_params": 10 ** 9}, **kw))


INF = float("inf")

CASES = {
    # TypeError: '<=' not supported between instances of 'int' and 'str' (and 'NoneType')
    "F.dropout(x, '0.5')": (lambda: F.dropout(x3(), "0.5"), TypeError, "dropout probability p must be a number, got '0.5'"),
    "F.dropout(x, None)": (lambda: F.dropout(x3(), None), TypeError, "dropout probability p must be a number, got None"),
    # refused as 1 is (out of [0, 1)); a bool is no probability
    "F.dropout(x, True)": (lambda: F.dropout(x3(), True), TypeError, "must be a number, got True"),
    "F.dropout(x, nan)": (lambda: F.dropout(x3(), float("nan")), ValueError, r"probability in \[0, 1\), got nan"),
    "nn.Dropout('0.5')": (lambda: nn.Dropout("0.5"), TypeError, "Dropout: dropout probability p must be a number"),
    "LoRALinear(dropout=1.0)": (lambda: LoRALinear(nn.Linear(3, 3), 2, dropout=1.0), ValueError,
                                r"dropout \(a probability, e.g. 0.1\) must be a probability in \[0, 1\)"),
    # OverflowError: cannot convert float infinity to integer
    "deepspeed_estimate(additional_buffer_factor=inf)": (deepspeed(additional_buffer_factor=INF), ValueError,
                                                         "additional_buffer_factor is DeepSpeed's allowance, a finite"),
    # OverflowError, as for inf: the product is past a float
    "deepspeed_estimate(additional_buffer_factor=1e300)": (deepspeed(additional_buffer_factor=1e300), ValueError,
                                                           "more bytes than a float holds"),
    # OverflowError: int too large to convert to float
    "deepspeed_estimate(total_params=10**400)": (deepspeed(total_params=10 ** 400), ValueError,
                                                 "more bytes than a float holds"),
    # accepted: any truthy value picked the offload branch
    "deepspeed_estimate(cpu_offload=1)": (deepspeed(cpu_offload=1), TypeError, "cpu_offload must be True or False, got 1"),
    "deepspeed_estimate(zero_init='no')": (deepspeed(stage=3, zero_init="no"), TypeError,
                                           "zero_init must be True or False, got 'no'"),
    # accepted: 2.0 == 2
    "deepspeed_estimate(stage=2.0)": (deepspeed(stage=2.0), ValueError, "ZeRO stage 2 or 3, got 2.0"),
    # AttributeError: 'list' object has no attribute 'size'
    "dequantize_nf4(packed, [1.0], n)": (lambda: dequantize_nf4(codes()[0], [1.0], 100), TypeError,
                                         "absmax must be the float array of scales.*got list"),
    # accepted: integer scales
    "dequantize_nf4(packed, int absmax, n)": (lambda: dequantize_nf4(codes()[0], codes()[1].astype(np.int32), 100),
                                              TypeError, "absmax must be the float array.*got int32 on cpu"),
    # ValueError: operands could not be broadcast together with shapes (1,50) (1,1,2) (1,50)
    "dequantize_nf4(packed, absmax (1, 2), n)": (lambda: dequantize_nf4(codes()[0], codes()[1].reshape(1, 2), 100),
                                                 ValueError, r"absmax must be the flat array .* got shape \(1, 2\)"),
    # ValueError: could not broadcast input array from shape (2,25) into shape (50,)
    "dequantize_nf4(packed (2, 25), absmax, n)": (lambda: dequantize_nf4(codes()[0].reshape(2, 25), codes()[1], 100),
                                                  ValueError, r"packed must be the flat array .* got shape \(2, 25\)"),
}


@pytest.mark.parametrize("training", ["no", 0, None])
def test_the_training_flag_is_true_or_false_for_dropout_and_module_train(training):
    """F.dropout(x, 0.5, "no") dropped half the values and model.train("no") set every module's
    training to "no", so Dropout dropped; 0 and None were taken as False. PyTorch refuses a
    non-bool in both. A refused train() changes no module, and a good call after it works."""
    with pytest.raises(TypeError, match=f"dropout: training must be True or False, got {training!r}"):
        F.dropout(x3(), 0.5, training)
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    model.eval()
    with pytest.raises(TypeError, match=f"train: mode must be True or False, got {training!r}"):
        model.train(training)
    assert [m.training for m in model.modules()] == [False, False, False]
    assert [m.training for m in model.train(np.True_).modules()] == [True, True, True]
    np.testing.assert_array_equal(F.dropout(x3(), 0.5, np.False_).numpy(), np.ones(3))


@pytest.mark.parametrize("name", list(CASES))
def test_refused_with_a_message_saying_what_was_wrong(name):
    make, error, message = CASES[name]
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize("state", [[1, -1], np.array([7, -3], np.int64)])
def test_set_rng_state_refuses_a_negative_counter_and_keeps_the_state(state):
    """[1, -1] was accepted: the next tm.rand raised (SeedSequence takes no negative entropy) and
    get_rng_state() an OverflowError."""
    tm.manual_seed(5)
    tm.rand(3)
    before = tm.get_rng_state()
    with pytest.raises(ValueError, match=r"set_rng_state: the counter .* must be in \[0, 2\*\*63\), got -"):
        tm.set_rng_state(state)
    np.testing.assert_array_equal(tm.get_rng_state(), before)
    drawn = tm.rand(4).numpy()
    tm.set_rng_state(before)
    np.testing.assert_array_equal(tm.rand(4).numpy(), drawn)  # the state in place was the one before


def test_the_checks_leave_valid_input_alone():
    np.testing.assert_array_equal(F.dropout(x3(), np.float32(0.0)).numpy(), np.ones(3))
    assert nn.Dropout(0.25).p == 0.25
    assert conventions.deepspeed_estimate(3, np.int64(10 ** 9), 10 ** 7, 8, 2, np.True_, False, True, 2) == \
        conventions.deepspeed_estimate(3, 10 ** 9, 10 ** 7, 8, 2, True, False, True, 2.0) == (16 * 10 ** 9, 165 * 10 ** 6)
    packed, absmax = codes()
    values = dequantize_nf4(packed, absmax, 100)
    # each value within half the widest gap between two NF4 levels (absmax is 1 in both blocks)
    assert np.abs(values - np.linspace(-1, 1, 100)).max() <= np.diff(LEVELS).max() / 2 + 1e-7
    tm.set_rng_state(np.array([2 ** 64 - 1, 2 ** 63 - 1], np.uint64))  # the largest seed and counter
    assert tm.get_rng_state().tolist() == [-1, 2 ** 63 - 1]
