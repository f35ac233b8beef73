"""The terms of the closed form, each written once: bytes per parameter of a precision
(:mod:`.precision`), model states per rank under ZeRO, offload and pipelines (:mod:`.sharding`,
:mod:`.states`), saved tensors per layer (:mod:`.activations`), the moments a step can peak at
(:mod:`.moments`), one step's buckets (:mod:`.analytic`), generation (:mod:`.inference`) and
LoRA/QLoRA fine-tuning (:mod:`.finetune`)."""
