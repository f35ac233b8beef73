"""The search: which technique stacks fit N GPUs and the fewest GPUs each needs (:mod:`.fits`),
Megatron's 3D layouts (:mod:`.parallel`), and the probe planner's combinations with the fastest
that fits a budget (:mod:`.plan`)."""
