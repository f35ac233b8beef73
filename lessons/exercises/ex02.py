"""Lesson 2 exercises: half-precision formats and loss scaling by hand. Replace each body.

Work with NumPy only (``np.float16``, ``np.uint16``/``np.uint32`` views); the checks compare
your answers with tinymem's implementation and with NumPy's own float16.
"""


def fp16_fields(x):
    """Split a float16 number into its fields: ``(sign, exponent, mantissa)`` as Python ints.

    ``sign`` is 0 or 1, ``exponent`` the 5 stored bits (0..31), ``mantissa`` the 10 stored bits.
    Hint: ``np.float16(x).view(np.uint16)``.
    """
    raise NotImplementedError("exercise 02.1")


def fp16_value(sign, exponent, mantissa):
    """The value of float16 fields as a Python float: normal numbers (1 + m/1024) * 2^(e-15),
    subnormals (exponent 0) (m/1024) * 2^-14, exponent 31: inf (m == 0) or NaN. Compute it
    from the formula: the check switches NumPy's float16 and ``struct.unpack`` off."""
    raise NotImplementedError("exercise 02.2")


def to_bfloat16_bits(x):
    """float32 array -> bfloat16 bits (uint16 array), round to nearest, ties to even; every
    NaN becomes 0x7FC0. Integer arithmetic on ``x.view(np.uint32)``: no float rounding."""
    raise NotImplementedError("exercise 02.3")


def update_scale(scale, growth_tracker, found_inf, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000):
    """One dynamic loss-scale update (GradScaler.update): returns ``(scale, growth_tracker)``.

    An inf/NaN: scale * backoff_factor and the tracker restarts at 0. Otherwise the tracker
    counts clean steps; when it reaches growth_interval the scale grows by growth_factor and
    the tracker restarts at 0.
    """
    raise NotImplementedError("exercise 02.4")


def largest_safe_scale(max_abs_grad):
    """The largest power of two S such that max_abs_grad * S stays finite in float16.

    (Rounding to float16 turns values >= 65520 into inf.)
    """
    raise NotImplementedError("exercise 02.5")
