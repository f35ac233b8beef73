"""Memory-saving techniques, one package or file each; each plugs into one seam of the engine.

    checkpoint/    recompute activations instead of keeping them (a Function of its own)
    precision/     half-precision storage, fp32 masters, loss scaling (parameter storage, saved-tensor hooks)
    quantization/  int8 weights and activations with calibration (saved-tensor hooks, module swap)
    offload/       activations, weights and optimizer state on the host or disk (hooks, optimizer state)
    lora/          LoRA adapters on frozen weights, NF4 weights (QLoRA), paged optimizer state
                   (module swap, a Function of its own, the ledger's pagers)
    microbatch.py  gradient accumulation over micro-batches
    batch_size.py  the largest batch that trains under a budget
"""
