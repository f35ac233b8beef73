"""The terms of the closed form, each written once, below the door (:mod:`..inputs`: a function
here that takes a stack takes it resolved, but the public entries, which resolve their own):
bytes per parameter of a precision (:mod:`.precision`), model states per rank under ZeRO,
offload and pipelines (:mod:`.sharding`, :mod:`.states`), saved tensors per layer
(:mod:`.activations`), the moments a step can peak at (:mod:`.moments`), one step's buckets
(:mod:`.analytic`), generation (:mod:`.inference`) and LoRA/QLoRA fine-tuning (:mod:`.finetune`)."""
