"""NF4 as users misuse it: non-finite weights, sizes and blocks out of range, a bias of the wrong
shape."""
import numpy as np
import pytest

from tinymem.techniques.lora import (NF4Linear, dequantize_absmax, dequantize_nf4, expected_bits_per_weight,
                                     quantize_absmax, quantize_nf4)

@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_a_non_finite_weight_is_refused_with_its_index(bad):
    w = np.ones((4, 64), np.float32)
    w[2, 5] = bad
    with pytest.raises(ValueError, match=r"1 non-finite value.*flat index 133"):
        quantize_nf4(w)
    with pytest.raises(ValueError, match="non-finite"):
        NF4Linear(w)


def test_one_non_finite_scale_spoils_only_its_own_block_of_256_scales():
    absmax = np.random.default_rng(0).random(1024).astype(np.float32) + 0.5
    absmax[700] = np.inf
    with np.errstate(invalid="ignore"):  # inf - inf and 0 * inf in the spoiled block, as intended
        back = dequantize_absmax(*quantize_absmax(absmax))
    outside = np.r_[0:512, 768:1024]
    assert np.isfinite(back[outside]).all()
    assert np.abs(back[outside] - absmax[outside]).max() < 0.01
    finite = absmax.copy()
    finite[700] = 1.0
    np.testing.assert_array_equal(quantize_absmax(finite)[2], finite.mean(keepdims=True))


@pytest.mark.parametrize("size", [-1, 11, 100, 2.5])
def test_dequantize_refuses_a_size_outside_what_is_stored(size):
    packed, absmax = quantize_nf4(np.ones(10, np.float32))
    with pytest.raises(ValueError, match="size must be an integer from 0 to 10"):
        dequantize_nf4(packed, absmax, size)


def test_dequantize_refuses_scales_that_do_not_fit_the_codes():
    packed, absmax = quantize_nf4(np.ones(200, np.float32))
    with pytest.raises(ValueError, match="need 4 scales, got 3"):
        dequantize_nf4(packed, absmax[:3], 200)


@pytest.mark.parametrize("block", [0, -64, 1.5])
def test_quantize_refuses_a_block_that_is_not_a_positive_integer(block):
    with pytest.raises(ValueError, match=r"block \(values per scale\) must be a positive integer"):
        quantize_nf4(np.ones(64, np.float32), block=block)


@pytest.mark.parametrize("n", [0, -5])
def test_expected_bits_per_weight_refuses_a_count_below_one(n):
    with pytest.raises(ValueError, match="n \\(the number of weights\\) must be a positive integer"):
        expected_bits_per_weight(n)


def test_nf4linear_refuses_an_empty_weight_and_a_bias_of_the_wrong_shape():
    with pytest.raises(ValueError, match="at least one value"):
        NF4Linear(np.ones((0, 3), np.float32))
    w = np.ones((4, 3), np.float32)
    for bias in (np.ones(1, np.float32), np.ones(5, np.float32), np.ones((4, 1), np.float32), np.ones(4, np.int64)):
        with pytest.raises(ValueError, match=r"bias must be a float array of shape \(4,\)"):
            NF4Linear(w, bias)
    assert NF4Linear(w, np.ones(4, np.float32)).bias.shape == (4,)


@pytest.mark.parametrize("key, bad", [("packed", lambda v: v.astype(np.int64) + 1000),
                                      ("packed", lambda v: v.astype(np.float32) + 0.5),
                                      ("absmax_scale", lambda v: np.full_like(v, np.nan)),
                                      ("absmax_codes", lambda v: v.astype(np.float32))])
def test_a_state_with_codes_out_of_range_or_non_finite_scales_is_refused_and_nothing_is_loaded(key, bad):
    rng = np.random.default_rng(0)
    source = NF4Linear(rng.standard_normal((8, 300)).astype(np.float32), np.ones(8, np.float32))
    target = NF4Linear(rng.standard_normal((8, 300)).astype(np.float32), np.zeros(8, np.float32))
    before = {name: value.copy() for name, value in target.state_dict().items()}
    state = source.state_dict()
    state[key] = bad(state[key])
    with pytest.raises(ValueError, match=f"{key} must hold"):
        target.load_state_dict(state)
    for name, value in target.state_dict().items():
        np.testing.assert_array_equal(value, before[name])


def test_a_complex_weight_codes_wider_than_a_byte_and_a_non_bool_double_quant_are_refused():
    with pytest.raises(TypeError, match="real .float. weight, got complex64"):
        quantize_nf4(np.ones(8, np.complex64))
    packed, absmax = quantize_nf4(np.linspace(-1, 1, 64, dtype=np.float32))
    for codes in (packed.astype(np.int64) + 256, packed.astype(np.float32), list(packed)):
        with pytest.raises(TypeError, match="packed must be the uint8 array"):
            dequantize_nf4(codes, absmax, 64)
    for flag in ("no", None, 0):
        with pytest.raises(TypeError, match="double_quant must be True or False"):
            NF4Linear(np.ones((2, 4), np.float32), double_quant=flag)
        with pytest.raises(TypeError, match="double_quant must be True or False"):
            expected_bits_per_weight(64, flag)


def test_quantize_absmax_refuses_no_scales():
    with pytest.raises(ValueError, match="no scales to quantize"):
        quantize_absmax(np.zeros(0, np.float32))
