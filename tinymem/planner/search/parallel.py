"""3D parallelism as Megatron composes it: t tensor-parallel ranks inside a node, p pipeline
stages, d data-parallel copies; t·p·d GPUs (Narayanan et al. 2021).

A GPU holds 1/(t·p) of the model's parameters (and ZeRO-1, Megatron's distributed optimizer,
shards the optimizer state over the d copies). Its activations, by Korthikanti et al. (2022):
one layer keeps s·b·h·(10 + 24/t + 5·a·s/(h·t)) bytes with tensor parallelism, s·b·h·(34/t +
5·a·s/(h·t)) with sequence parallelism as well, the attention core's 5·a·s/(h·t) term gone with
selective recomputation, 2·s·b·h with full recomputation; and the first stage of a 1F1B
pipeline holds min(p, m) micro-batches of its L/p layers: p·(L/p) = L layers' worth once m >= p.
GPT-3 175B at t = 8, p = 8, one 2048-token sequence: 55.6, 34.4, 10.3 and 4.8 GB.
Megatron's interleaved schedule (v model chunks of L/(p·v) layers per GPU, Narayanan et al. 2021)
starts more forwards before the first backward: the first stage holds L·(1 + (p-1)/(p·v)) layers'
worth, the paper's Section 4.2.3 (its 175B and 530B runs use v = 3: x1.29 and x1.32).
"""
import math

from ...checks import positive_int
from ..model import architectures as archs
from ..terms.activations import activations_per_layer
from ..terms.moments import pipeline_in_flight

MAX_TENSOR = 8  # tensor parallelism stays inside one node of 8 GPUs: it communicates every layer


def interleaved_chunks_in_flight(stages, micro_batches, chunks):
    """Model chunks whose activations the first GPU holds at once under Megatron's interleaved
    1F1B schedule with ``chunks`` v per GPU: rank 0 warms up with 2·(p-1) + (v-1)·p chunk forwards
    and the steady state runs one more before each backward, at most every chunk of every
    micro-batch (Megatron's ``forward_backward_pipelining_with_interleaving``, which runs only when
    p divides the micro-batches). Times L/(p·v) layers: L·(1 + (p-1)/(p·v)) once m > p."""
    for name, value in (("stages", stages), ("micro_batches", micro_batches), ("chunks", chunks)):
        positive_int(name, value)
    if micro_batches % stages:
        raise ValueError(f"the interleaved schedule needs the micro-batches ({micro_batches}) to be a multiple "
                         f"of the pipeline stages ({stages}), as Megatron does; change either")
    return min(2 * (stages - 1) + (chunks - 1) * stages + 1, micro_batches * chunks)


def stage_activations(arch, micro_batch, stack, interleave=1):
    """Bytes of saved activations on the first pipeline stage, the paper's count: micro-batches
    in flight x the stage's layers x one layer (:func:`~.activations.activations_per_layer` in
    mode "korthikanti", split over ``stack.tensor`` ranks). ``interleave`` v > 1: Megatron's
    interleaved schedule, each GPU v chunks of L/(p·v) layers (L must divide evenly), chunks in
    flight from :func:`interleaved_chunks_in_flight`."""
    arch = archs.get_arch(arch)
    positive_int("interleave", interleave)
    recompute = "none" if stack.recompute == "none" else ("selective" if stack.recompute == "selective" else "full")
    layer = activations_per_layer(arch.seq, micro_batch, arch.hidden, arch.heads, "korthikanti", recompute,
                                  ffn=archs.ffn(arch), mlp=arch.mlp, norm=arch.norm,
                                  tensor_parallel=stack.tensor, sequence_parallel=stack.sequence_parallel,
                                  kv_heads=archs.kv_heads(arch), experts=arch.experts, top_k=arch.top_k)
    if interleave == 1:
        in_flight = pipeline_in_flight(0, stack.pipeline, stack.micro_batches, stack.schedule)
        return in_flight * math.ceil(arch.layers / stack.pipeline) * layer
    if stack.schedule != "1f1b" or arch.layers % (stack.pipeline * interleave):
        raise ValueError(f"interleaving {interleave} chunks needs the 1F1B schedule and the {arch.layers} layers "
                         f"to split evenly into {stack.pipeline} stages x {interleave} chunks; "
                         "choose an interleave that divides layers / pipeline")
    chunks = interleaved_chunks_in_flight(stack.pipeline, stack.micro_batches, interleave)
    return chunks * (arch.layers // (stack.pipeline * interleave)) * layer


def splits(arch, tensor):
    """True when ``tensor`` ranks split the heads evenly (and the kv heads, or each kv head is
    copied to tensor/kv ranks, as Megatron does when t exceeds them)."""
    kv = archs.kv_heads(arch)
    return arch.heads % tensor == 0 and (kv % tensor == 0 or tensor % kv == 0)


def layouts(arch, gpus, max_tensor=MAX_TENSOR):
    """Every ``(t, p, d)`` with t·p·d = ``gpus``: t a power of two up to ``max_tensor`` that
    divides the heads (and the kv heads, or is divided by them), p at most the layers."""
    arch = archs.get_arch(arch)
    out = []
    t = 1
    while t <= min(max_tensor, gpus):
        if gpus % t == 0 and splits(arch, t):
            rest = gpus // t
            out += [(t, p, rest // p) for p in range(1, min(rest, arch.layers) + 1) if rest % p == 0]
        t *= 2
    return out
