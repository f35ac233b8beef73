"""More inputs that used to end in a bare exception from inside NumPy or Python (IndexError,
AxisError, ZeroDivisionError, AttributeError, ...) or in a silently dubious answer, and are now
refused with a message naming the argument, what it got and what it expects. The comment on
each case says what happened before. Everything is built inside the call, not at import."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import data, memory, nn, optim
from tinymem.checks import AxisError
from tinymem.distributed.comm import Communicator, check_rank
from tinymem.distributed.pipeline import bubble_fraction
from tinymem.memory.sampler import Monitor
from tinymem.planner import analytic, architectures, plan, workload
from tinymem.rl.replay import ReplayBuffer
from tinymem.techniques import precision, quantization as Q
from tinymem.techniques.checkpoint import checkpoint, checkpoint_sequential
from tinymem.techniques.offload import offload_optimizer


def x23():
    return tm.randn(2, 3)


def P():
    return nn.Parameter(np.ones(3, np.float32))


CASES = {
    # IndexError 'list index out of range' from a Python list
    "transpose axis out of range": (lambda: F.transpose(x23(), 0, 5), AxisError,
                                    "transpose: axis 5 is out of range for a tensor with 2 dimensions"),
    # IndexError 'tuple index out of range'
    "cat of nothing": (lambda: F.cat([]), ValueError, "concatenate needs at least one tensor"),
    "cat of one tensor": (lambda: F.cat(x23()), TypeError, "list or tuple of tensors, got a Tensor"),
    "cat axis out of range": (lambda: F.cat([x23(), x23()], axis=5), AxisError, "concatenate: axis 5"),
    # NumPy's AxisError from deep inside np.stack / x.max
    "stack axis out of range": (lambda: F.stack([x23(), x23()], axis=5), AxisError, "stack: axis 5"),
    "softmax axis out of range": (lambda: F.softmax(x23(), axis=5), AxisError, "softmax: axis 5"),
    "log_softmax axis out of range": (lambda: F.log_softmax(x23(), axis=-3), AxisError, "log_softmax: axis -3"),
    # IndexError without the op's name
    "sum axis out of range": (lambda: F.sum(x23(), axis=2), AxisError, "sum: axis 2 is out of range"),
    # NumPy's broadcast error, and a bias of shape (1,) was added to every output silently
    "linear bias of the wrong length": (lambda: F.linear(x23(), tm.randn(4, 3), tm.randn(5)), ValueError,
                                        r"bias of shape \(5,\) for weight of shape \(4, 3\); it must be \(4,\)"),
    "linear bias of one element": (lambda: F.linear(x23(), tm.randn(4, 3), tm.randn(1)), ValueError, "it must be"),
    # IndexError 'tuple index out of range'
    "linear weight 1-d": (lambda: F.linear(x23(), tm.randn(3)), ValueError, "weight \\(out_features, in_features\\)"),
    "Linear on a 0-d input": (lambda: nn.Linear(3, 2)(tm.tensor(np.float32(1.0))), ValueError, "does not fit weight"),
    # AttributeError 'list' object has no attribute 'dtype'
    "Linear on a list": (lambda: nn.Linear(3, 2)([[1.0, 2.0, 3.0]]), TypeError, "input must be a Tensor or an array"),
    # a 1-d table gave one number per index
    "embedding of a 1-d table": (lambda: F.embedding(np.array([0, 1]), tm.randn(5)), ValueError, "2-d table"),
    # IndexError 'arrays used as indices must be of integer type'
    "embedding_bag float offsets": (lambda: F.embedding_bag(np.array([0, 1, 2]), tm.randn(5, 3),
                                                            np.array([0.0, 2.0])), TypeError, "offsets must be integers"),
    # UFuncTypeError from exp()
    "attention on integers": (lambda: F.scaled_dot_product_attention(*(tm.tensor(np.ones((1, 1, 2, 2), np.int64)),) * 3),
                              TypeError, "must be floating"),
    # built without complaint (a layer of no features), or ZeroDivisionError, or NumPy's
    # 'negative dimensions are not allowed'
    "Linear(0, 3)": (lambda: nn.Linear(0, 3), ValueError, "Linear: in_features must be a positive integer, got 0"),
    "Linear(3, -1)": (lambda: nn.Linear(3, -1), ValueError, "out_features must be a positive integer, got -1"),
    "Linear(2.5, 3)": (lambda: nn.Linear(2.5, 3), ValueError, "in_features must be a positive integer, got 2.5"),
    "Conv2d(0, 4, 3)": (lambda: nn.Conv2d(0, 4, 3), ValueError, "Conv2d: in_channels must be a positive integer"),
    "Conv2d(-1, 4, 3)": (lambda: nn.Conv2d(-1, 4, 3), ValueError, "in_channels must be a positive integer, got -1"),
    "Conv2d kernel 0": (lambda: nn.Conv2d(3, 4, 0), ValueError, r"Conv2d: kernel \(0, 0\)"),
    "MaxPool2d(0)": (lambda: nn.MaxPool2d(0), ValueError, r"MaxPool2d: kernel \(0, 0\)"),
    "AvgPool2d stride 0": (lambda: nn.AvgPool2d(2, stride=0), ValueError, r"AvgPool2d: kernel \(2, 2\) and stride \(0, 0\)"),
    "Upsample(0)": (lambda: nn.Upsample(0), ValueError, "Upsample: scale_factor must be a positive integer"),
    "Upsample bilinear": (lambda: nn.Upsample(mode="bilinear"), ValueError, "mode='nearest' only"),
    "Embedding(0, 4)": (lambda: nn.Embedding(0, 4), ValueError, "Embedding: num_embeddings must be a positive integer"),
    "EmbeddingBag(5, -1)": (lambda: nn.EmbeddingBag(5, -1), ValueError, "embedding_dim must be a positive integer"),
    "EmbeddingBag mode max": (lambda: nn.EmbeddingBag(5, 3, mode="max"), ValueError, "mode 'max' is not supported"),
    "LayerNorm(0)": (lambda: nn.LayerNorm(0), ValueError, "each size of normalized_shape must be a positive integer"),
    "LayerNorm eps < 0": (lambda: nn.LayerNorm(3, eps=-1), ValueError, "LayerNorm: eps must be > 0"),
    "BatchNorm2d(0)": (lambda: nn.BatchNorm2d(0), ValueError, "num_features must be a positive integer, got 0"),
    # the running mean diverged
    "BatchNorm2d momentum 2": (lambda: nn.BatchNorm2d(3, momentum=2), ValueError, r"momentum must be in \[0, 1\]"),
    "MultiheadAttention(0, 1)": (lambda: nn.MultiheadAttention(0, 1), ValueError, "embed_dim must be a positive integer"),
    "MultiheadAttention(8, 0)": (lambda: nn.MultiheadAttention(8, 0), ValueError, "num_heads must be a positive integer"),
    "MultiheadAttention(8, -2)": (lambda: nn.MultiheadAttention(8, -2), ValueError, "num_heads must be a positive"),
    "MultiheadAttention chunk 0": (lambda: nn.MultiheadAttention(8, 2, chunk_size=0), ValueError, "chunk_size"),
    # IndexError 'list index out of range'
    "Sequential index out of range": (lambda: nn.Sequential(nn.ReLU())[5], IndexError,
                                      "Sequential index 5 is out of range: it holds 1 modules"),
    # optimizers. TypeError "'Linear' object is not iterable", "'NoneType' object is not iterable"
    "Adam of a module": (lambda: optim.Adam(nn.Linear(2, 2)), TypeError, "got a Linear module: pass model.parameters()"),
    "Adam of None": (lambda: optim.Adam(None), TypeError, "params must be an iterable of Tensors"),
    # TypeError "'float' object is not subscriptable"
    "Adam betas 0.9": (lambda: optim.Adam([P()], betas=0.9), TypeError, r"betas must be a pair \(beta1, beta2\), got 0.9"),
    "Lion betas of three": (lambda: optim.Lion([P()], betas=(0.9, 0.9, 0.9)), TypeError, "betas must be a pair"),
    # NumPy's UFuncTypeError at Adam's step (SGD stepped with it silently)
    "integer gradient": (lambda: setattr(P(), "grad", np.ones(3, np.int64)), TypeError,
                         "assigned grad of dtype int64 to a float32 tensor"),
    # techniques. TypeError "'Linear' object is not iterable"
    "checkpoint_sequential of a Linear": (lambda: checkpoint_sequential(nn.Linear(2, 2), 1, tm.randn(1, 2)), TypeError,
                                          "takes an nn.Sequential or a list of layers, got a Linear"),
    # TypeError "'int' object is not callable", raised from inside the recomputation Function
    # AttributeError 'NoneType' object has no attribute 'param_groups' / 'parameters'
    "GradScaler step of None": (lambda: precision.GradScaler().step(None), TypeError, "GradScaler takes the optimizer, got NoneType"),
    "half of a function": (lambda: precision.half(lambda x: x), TypeError, "half\\(\\) takes a Module, got function"),
    # 2.5 was refused by its own check; a string raised int()'s ValueError
    "GradScaler growth_interval as a string": (lambda: precision.GradScaler(growth_interval="10"), ValueError,
                                               "growth_interval must be a positive integer, got '10'"),
    # NumPy's "operands could not be broadcast"; a weight of shape (1,) was broadcast silently
    "layer_norm weight of another length": (lambda: F.layer_norm(x23(), 3, tm.randn(4), tm.randn(4)), ValueError,
                                            r"layer_norm: weight of shape \(4,\) for normalized_shape \(3,\)"),
    "layer_norm bias of shape (1,)": (lambda: F.layer_norm(x23(), 3, tm.randn(3), tm.randn(1)), ValueError,
                                      r"layer_norm: bias of shape \(1,\)"),
    # built silently, refused only at the first forward
    "GELU('none')": (lambda: nn.GELU("none"), ValueError, "approximate='none'"),
    # FileNotFoundError naming the temporary file, TypeError from os.fspath
    "save into a missing folder": (lambda: tm.save({"a": 1}, "/nonexistent-tinymem/dir/f.tm"), FileNotFoundError,
                                   "the folder /nonexistent-tinymem/dir does not exist"),
    "save to None": (lambda: tm.save({"a": 1}, None), TypeError, "path to write must be a str or os.PathLike, got NoneType"),
    "checkpoint of a number": (lambda: checkpoint(5, tm.randn(2, requires_grad=True)), TypeError,
                               "checkpoint: the first argument must be the function or Module"),
    # AttributeError "'NoneType' object has no attribute 'update_place'"
    "offload_optimizer of None": (lambda: offload_optimizer(None), TypeError, "offload_optimizer wraps a tinymem optimizer"),
    # AttributeError "'function' object has no attribute 'named_modules'"
    "quantize a function": (lambda: Q.prepare(lambda x: x), TypeError, "quantization works on an nn.Module"),
    # it calibrated on the batch's rows, one by one
    "calibrate on one tensor": (lambda: Q.calibrate(Q.prepare(nn.Sequential(nn.Linear(2, 2))), tm.ones(2, 2)),
                                TypeError, "iterable of batches, got one Tensor"),
    # NumPy's AxisError from moveaxis
    "per-channel observer axis 5": (lambda: Q.PerChannelMinMaxObserver(ch_axis=5)(np.ones((2, 3), np.float32)),
                                    AxisError, r"PerChannelMinMaxObserver\(ch_axis\): axis 5"),
    # distributed. MPI's error stack, a ZeroDivisionError, AttributeError 'list' object has no attribute 'flags'
    "broadcast root out of range": (lambda: check_rank("broadcast: root", 3, 1), ValueError,
                                    r"broadcast: root must be a rank in 0..0 \(the world has 1\), got 3"),
    "all_reduce of a list": (lambda: Communicator._check_contiguous("all_reduce", [1.0, 2.0]), TypeError,
                             "all_reduce: MPI sends NumPy or CuPy arrays, got a list"),
    "Communicator timeout 'abc'": (lambda: Communicator(timeout="abc"), TypeError, "timeout must be a number, got 'abc'"),
    "Communicator comm=5": (lambda: Communicator(comm=5), TypeError, "comm must be an mpi4py communicator"),
    "bubble_fraction of 0 micro-batches": (lambda: bubble_fraction(1, 0), ValueError,
                                           "micro_batches must be a positive integer, got 0"),
    # planner. TypeError 'int' object is not iterable; 4.7 truncated to 4, silently
    "workload sizes 5": (lambda: workload("mlp", 5), TypeError, "mlp sizes must be a list of integers"),
    "workload fractional sizes": (lambda: workload("mlp", [4.7, 8.9, 2.2]), ValueError, "mlp sizes must be integers"),
    # read letter by letter: "unknown precision 'f', 'p', '1', '6'"
    "plan precisions as a string": (lambda: plan("mlp", "4,8,2", 8, None, precisions="fp16"), TypeError,
                                    r"list of names, got the string 'fp16': pass \['fp16'\]"),
    # TypeError "'<' not supported between instances of 'str' and 'int'"; [0] gave an empty plan
    "plan batch_size '8'": (lambda: plan("mlp", "4,8,2", "8", None), ValueError, "batch_size must be a positive integer"),
    "plan micro_batches [0]": (lambda: plan("mlp", "4,8,2", 8, None, micro_batches=[0]), ValueError,
                               "each of micro_batches must be a positive integer, got 0"),
    # AttributeError "'tuple' object has no attribute 'precision'"; 2.5 ranks or sequences gave a number
    "breakdown stack tuple": (lambda: analytic.breakdown("gpt2", 1, ("fp32",)), TypeError, "stack must be a planner.analytic.Stack"),
    "breakdown ranks 2.5": (lambda: analytic.breakdown("gpt2", 1, analytic.Stack(ranks=2.5)), ValueError,
                            "Stack.ranks must be a positive integer, got 2.5"),
    "breakdown batch 2.5": (lambda: analytic.breakdown("gpt2", 2.5), ValueError, "batch must be a positive integer"),
    # TypeError unhashable type: 'list'; ValueError "invalid literal for int()"
    "get_arch of a list": (lambda: architectures.get_arch(["gpt2"]), ValueError, "unknown architecture"),
    "custom layers 'x'": (lambda: architectures.custom("x", 768, 12, 1024, 50257), ValueError,
                          "custom: layers must be a positive integer, got 'x'"),
    # memory. TypeError "conversion from numpy.float32 to Decimal is not supported" is below, as an answer
    "format_bytes of a string": (lambda: memory.format_bytes("1.5GB"), TypeError, "must be a number, got '1.5GB'"),
    "monitor interval 'abc'": (lambda: Monitor(interval="abc"), TypeError, "monitor interval must be a number"),
    # KeyError 'foo'; TypeError unhashable type; TypeError "cannot create weak reference to 'int' object"
    "ledger bytes of an unknown bucket": (lambda: memory.LEDGER.bytes("foo"), ValueError, "unknown bucket 'foo'"),
    "register an unhashable bucket": (lambda: memory.LEDGER.register(np.zeros(2), ["workspace"]), ValueError,
                                      r"unknown bucket \['workspace'\]"),
    "register_bytes owner 5": (lambda: memory.LEDGER.register_bytes(5, 100, "workspace", "host"), TypeError,
                               "owner must be an object that can be weakly referenced"),
    # TypeError "'NoneType' object is not callable", "'float' object cannot be interpreted as an integer"
    "find_leaks of None": (lambda: memory.find_leaks(None), TypeError, "step_fn.* must be callable, got None"),
    "find_leaks steps 3.5": (lambda: memory.find_leaks(lambda: None, steps=3.5), ValueError, "integer steps >= 3"),
    # data and rl. NumPy's "unrecognized seed string" at the first epoch
    "DataLoader seed 'a'": (lambda: data.DataLoader((np.ones(3),), seed="a"), ValueError, "seed must be an integer >= 0"),
    "DataLoader seed -1": (lambda: data.DataLoader((np.ones(3),), seed=-1), ValueError, "seed must be an integer >= 0"),
    # TypeError "'<' not supported", "'int' object is not iterable", "data type 'int7' not understood"
    "ReplayBuffer capacity '10'": (lambda: ReplayBuffer("10", (4,)), ValueError, "capacity must be an integer"),
    "ReplayBuffer frame_shape 4": (lambda: ReplayBuffer(10, 4), ValueError, "frame_shape must be a tuple of positive sizes"),
    "ReplayBuffer frame_shape (-1, 4)": (lambda: ReplayBuffer(10, (-1, 4)), ValueError, "frame_shape must be a tuple"),
    "ReplayBuffer frame_dtype int7": (lambda: ReplayBuffer(10, (4,), frame_dtype="int7"), TypeError,
                                      "frame_dtype must be a NumPy dtype"),
    # FileNotFoundError from tempfile
    "ReplayBuffer disk in a missing folder": (lambda: ReplayBuffer(10, (4,), storage="disk", directory="/nonexistent/x"),
                                              ValueError, "storage 'disk' cannot create its file in '/nonexistent/x'"),
    # NumPy "setting an array element with a sequence", "could not convert string to float"
    "replay action vector": (lambda: started_buffer().add([1, 2], 0.0, np.zeros(4, np.uint8)), TypeError,
                             "action must be an integer"),
    "replay reward 'x'": (lambda: started_buffer().add(1, "x", np.zeros(4, np.uint8)), TypeError,
                          "reward must be a number, got 'x'"),
    # AttributeError 'NoneType' object has no attribute 'integers'
    "replay sample rng None": (lambda: filled_buffer().sample(2, None), TypeError, "rng must be a NumPy Generator"),
    "replay sample 2.5": (lambda: filled_buffer().sample(2.5, np.random.default_rng(0)), ValueError,
                          "batch_size must be a positive integer, got 2.5"),
}


def started_buffer():
    buffer = ReplayBuffer(10, (4,))
    buffer.start_episode(np.zeros(4, np.uint8))
    return buffer


def filled_buffer():
    buffer = started_buffer()
    for step in range(3):
        buffer.add(step % 2, 1.0, np.full(4, step, np.uint8))
    return buffer


@pytest.mark.parametrize("name", list(CASES))
def test_refused_with_a_message_saying_what_was_wrong(name):
    make, error, message = CASES[name]
    with pytest.raises(error, match=message):
        make()


def test_axis_error_is_caught_as_value_error_and_as_index_error():
    for error in (ValueError, IndexError):
        with pytest.raises(error):
            F.sum(x23(), axis=7)


def test_the_checks_leave_valid_input_alone():
    x = x23()
    assert F.transpose(x, -1, 0).shape == (3, 2) and F.sum(x, axis=np.int64(1)).shape == (2,)
    assert F.cat((x, x), axis=-1).shape == (2, 6) and F.stack([x, x], axis=-1).shape == (2, 3, 2)
    assert F.cat(t for t in (x, x)).shape == (4, 3)
    assert F.linear(x, tm.randn(4, 3), tm.randn(4)).shape == (2, 4)
    assert nn.Sequential(nn.ReLU(), nn.Tanh())[-1].__class__ is nn.Tanh
    assert nn.LayerNorm((2, 3))(tm.randn(4, 2, 3)).shape == (4, 2, 3)
    assert nn.Linear(np.int64(3), 2).in_features == 3 and nn.Upsample(2.0).scale_factor == 2.0
    assert optim.Adam([P()], betas=[0.8, 0.9]).param_groups[0]["betas"] == (0.8, 0.9)
    p = P()
    p.grad = np.ones(3, np.float64)  # a float gradient of another width is still taken
    assert p.grad.shape == (3,)
    # NumPy floats and Fractions are sizes too (Decimal refused them with a TypeError)
    from fractions import Fraction
    assert memory.parse_bytes(np.float32(1.5)) == 1 and memory.parse_bytes(Fraction(5, 2)) == 2
    assert memory.format_bytes(np.int64(3000)) == "2.93 KiB" and bubble_fraction(4, 4) == 3 / 7
    assert architectures.tinymem_lm(np.int64(64), 32, 32, 2, 2).vocab == 64  # NumPy ints were refused
    assert len(filled_buffer().sample(2, np.random.default_rng(0)).action) == 2
