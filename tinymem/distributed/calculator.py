"""The ZeRO paper's arithmetic: model-state bytes per device and traffic per step.

Mixed-precision Adam keeps, per parameter, a 2-byte fp16 weight, a 2-byte fp16 gradient and
K = 12 bytes of optimizer state (fp32 master weight, momentum and variance): 16 bytes. With
P parameters on N devices (Rajbhandari et al. 2020, Figure 1 and Table 1):

    data parallel        (2 + 2 + K)·P                  = 16P
    ZeRO-1  (P_os)       2P + 2P + K·P/N                = 4P + 12P/N
    ZeRO-2  (P_os+g)     2P + (2 + K)·P/N               = 2P + 14P/N
    ZeRO-3  (P_os+g+p)   (2 + 2 + K)·P/N                = 16P/N

For 7.5B parameters on 64 devices: 120, 31.4, 16.6 and 1.9 GB (GB = 10^9 bytes).

tinymem trains in float32 with Adam: 4-byte weights, 4-byte gradients and K = 8 (momentum and
variance), 16 bytes per parameter as well; pass ``param_bytes=4, grad_bytes=4, k=8``.

Traffic (ring all-reduce = reduce-scatter + all-gather; b bytes per element): data parallel and
ZeRO-1/2 send 2(N-1)/N·bP per step and rank; ZeRO-3 3(N-1)/N·bP (parameters gathered for the
forward and again for the backward). The paper rounds (N-1)/N to 1: 2bP and 3bP.
"""

STRATEGIES = ("dp", "zero1", "zero2", "zero3")
LABELS = {"dp": "data parallel", "zero1": "ZeRO-1 (P_os)", "zero2": "ZeRO-2 (P_os+g)",
          "zero3": "ZeRO-3 (P_os+g+p)"}


def _check(strategy, params, world_size):
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if not (params >= 0 and world_size >= 1):  # negative bytes, or a division by zero
        raise ValueError(f"params must be >= 0 and world_size >= 1, got {params} and {world_size}")


def model_state_bytes(params, world_size, strategy, param_bytes=2, grad_bytes=2, k=12):
    """``{"parameter", "gradient", "optimizer", "total"}`` bytes per device for ``strategy``."""
    _check(strategy, params, world_size)
    shard = params / world_size
    level = STRATEGIES.index(strategy)
    out = {"parameter": param_bytes * (shard if level >= 3 else params),
           "gradient": grad_bytes * (shard if level >= 2 else params),
           "optimizer": k * (shard if level >= 1 else params)}
    out["total"] = out["parameter"] + out["gradient"] + out["optimizer"]
    return out


def traffic_bytes(params, world_size, strategy, element_bytes=2):
    """Bytes one rank sends per step (ring collectives) for ``strategy``."""
    _check(strategy, params, world_size)
    passes = 3 if strategy == "zero3" else 2
    return passes * (world_size - 1) / world_size * element_bytes * params


def paper_table(params=7.5e9, world_size=64):
    """The paper's example: rows of ``{strategy, label, gb}`` (per device, GB = 10^9 bytes)."""
    return [{"strategy": s, "label": LABELS[s],
             "gb": model_state_bytes(params, world_size, s)["total"] / 1e9} for s in STRATEGIES]


def format_table(rows):
    return "\n".join(f"  {r['label']:<20} {r['gb']:8.2f} GB" for r in rows)
