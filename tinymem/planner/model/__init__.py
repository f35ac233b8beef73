"""The model the closed form counts: named architectures (GPT-2/3, LLaMA-1/2/3, Mixtral) and
tinymem's own shapes, their presets, parameter shapes and counts (:mod:`.architectures`)."""
