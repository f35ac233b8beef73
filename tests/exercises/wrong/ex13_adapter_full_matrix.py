"""13.1, an adapter of r·in·out values (a rank-r stack of full matrices) instead of r·(in + out)."""


def lora_step_bytes(layers, r, adapted):
    frozen = sum(4 * (d_in * d_out + d_out) for d_in, d_out in layers)
    adapters = sum(4 * r * d_in * d_out for i, (d_in, d_out) in enumerate(layers) if i in adapted)
    return {"parameter": frozen + adapters, "gradient": adapters, "optimizer": 2 * adapters}
