"""03.2, round and shift but no clamp: values beyond the grid come back unclipped."""


def fake_quant(x, scale, zero_point, quant_min=0, quant_max=255, axis=None):
    return solution.fake_quant(x, scale, zero_point, -2**31, 2**31, axis)  # noqa: F821
