"""Device names go through one parser (``backend.check_device``) wherever a user gives one, and
the default device of a ``default_device_as`` block belongs to its thread."""
import threading

import numpy as np
import pytest

import tinymem as tm
from tinymem import backend, nn

BAD_NAMES = ["cuda:banana", "cuda:", "cuda:-1", "cuda:0x1", "cuda:1.0", "cpu:0", " cuda:0x"]


def _doors():
    """Every public place that reads a device name, each as a function of the name."""
    return {
        "check_device": backend.check_device,
        "set_default_device": tm.set_default_device,
        "default_device_as": lambda name: backend.default_device_as(name).__enter__(),
        "tensor(device=)": lambda name: tm.tensor([1.0], device=name),
        "zeros(device=)": lambda name: tm.zeros(2, device=name),
        "Linear(device=)": lambda name: nn.Linear(2, 2, device=name),
        "Tensor.to": lambda name: tm.ones(2).to(name),
        "Module.to": lambda name: nn.Linear(2, 2, device="cpu").to(name),
    }


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_malformed_device_name_is_refused_at_every_door_and_changes_nothing(name, standin):
    for door, call in _doors().items():
        with pytest.raises(tm.DeviceError, match="device") as caught:
            call(name)
        assert repr(name) in str(caught.value) or name in str(caught.value), (door, caught.value)
        assert backend.default_device() == "cuda", door  # the refused call left the default alone


def test_an_index_past_the_machines_gpus_is_refused_not_read_as_the_only_gpu(standin):
    for door, call in _doors().items():
        with pytest.raises(tm.DeviceError, match=r"this machine has 1 GPU\(s\), cuda:0 to cuda:0"):
            call("cuda:7")
    assert tm.zeros(2, device="cuda:0").device == "cuda"
    assert backend.check_device("CUDA:0") == "cuda" and backend.check_device("cuda") == "cuda"
    layer = nn.Linear(2, 2, device="cpu").to("cuda:0")
    assert layer.weight.device == "cuda" and tm.ones(2, device="cpu").to("cuda:0").device == "cuda"
    with backend.default_device_as("cuda:0"):
        assert tm.zeros(1).device == "cuda"


def test_an_existing_gpu_that_is_not_this_processs_is_refused_with_the_way_to_use_it(standin, monkeypatch):
    monkeypatch.setattr(standin.cuda.runtime, "getDeviceCount", lambda: 2)
    with pytest.raises(tm.DeviceError, match="CUDA_VISIBLE_DEVICES=1"):
        tm.zeros(2, device="cuda:1")
    assert tm.zeros(2, device="cuda:0").device == "cuda"


def test_tensor_to_still_reads_a_dtype_name_as_a_cast():
    assert tm.ones(2, device="cpu").to("float16").dtype == np.float16


def _interleaved(first, second):
    """Two threads enter default_device_as(first) and (second) in turn, and exit in the same
    order (so that each exits while the other is still inside); returns what each thread saw
    inside its block and after it, and what the main thread sees at the end."""
    entered, exited = threading.Barrier(2), threading.Barrier(2)
    seen, errors = {}, []

    def body(label, device, exit_first):
        try:
            with backend.default_device_as(device):
                entered.wait(timeout=10)
                seen[label, "inside"] = tm.zeros(1).device
                if not exit_first:
                    exited.wait(timeout=10)  # the other thread leaves its block first
            if exit_first:
                exited.wait(timeout=10)
            seen[label, "after"] = backend.default_device()
        except Exception as exc:  # shown by the assertion in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=("a", first, True)),
               threading.Thread(target=body, args=("b", second, False))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return seen, backend.default_device()


def test_two_threads_blocks_interleave_and_each_keeps_its_own_default(standin):
    tm.set_default_device("cpu")
    try:
        seen, main_after = _interleaved("cuda", "cpu")
        assert seen == {("a", "inside"): "cuda", ("b", "inside"): "cpu",
                        ("a", "after"): "cpu", ("b", "after"): "cpu"}, seen
        assert main_after == "cpu"
        seen, main_after = _interleaved("cpu", "cuda")
        assert seen[("b", "inside")] == "cuda" and seen[("a", "after")] == seen[("b", "after")] == "cpu"
        assert main_after == "cpu"
    finally:
        tm.set_default_device(None)


def test_a_block_in_one_thread_does_not_change_the_default_another_thread_sees(standin):
    inside, release = threading.Event(), threading.Event()

    def holder():
        with backend.default_device_as("cpu"):
            inside.set()
            release.wait(timeout=10)

    thread = threading.Thread(target=holder)
    thread.start()
    assert inside.wait(timeout=10)
    assert backend.default_device() == "cuda" and tm.zeros(1).device == "cuda"  # this thread's block
    release.set()
    thread.join()


def test_a_new_thread_starts_with_the_process_default_set_by_set_default_device(standin):
    seen = []
    tm.set_default_device("cuda")
    try:
        with backend.default_device_as("cpu"):  # this thread's block is not inherited
            thread = threading.Thread(target=lambda: seen.append(tm.zeros(1).device))
            thread.start()
            thread.join()
            assert tm.zeros(1).device == "cpu"
        assert seen == ["cuda"]
    finally:
        tm.set_default_device(None)


def test_set_default_device_inside_a_block_takes_effect_at_once_and_outlasts_it(standin):
    try:
        with backend.default_device_as("cpu"):
            tm.set_default_device("cuda")
            assert tm.zeros(1).device == "cuda"
        assert backend.default_device() == "cuda"
        tm.set_default_device("cpu")
        assert backend.default_device() == "cpu"
    finally:
        tm.set_default_device(None)


def test_simulated_ranks_make_their_arrays_on_the_callers_default_device(standin):
    from tinymem.distributed import ring
    results, _ = ring.simulate(2, lambda rank, exchange: tm.zeros(1).device)
    assert results == ["cuda", "cuda"]


@pytest.mark.parametrize("name", ["cuda:\u00b2", "cuda:\u0660", "cuda:\uff10"])
def test_an_index_of_non_ascii_digits_is_refused_by_the_device_parser(name, standin):
    # str.isdigit() is true for '²' (int() then raised a bare ValueError) and for the
    # Arabic-Indic and full-width zeros (read as cuda:0).
    for door, call in _doors().items():
        with pytest.raises(tm.DeviceError, match="whole number"):
            call(name)
        assert backend.default_device() == "cuda", door


def test_two_asyncio_tasks_blocks_interleave_and_each_keeps_its_own_default(standin):
    import asyncio

    async def inside(device, pause):
        with backend.default_device_as(device):
            await asyncio.sleep(pause)  # the other task enters (or leaves) its block meanwhile
            return tm.zeros(1).device

    async def outside():
        await asyncio.sleep(0.01)
        return backend.default_device()

    async def both():
        return await asyncio.gather(inside("cpu", 0.02), inside("cuda", 0.03), outside())

    tm.set_default_device("cpu")
    try:
        with backend.default_device_as("cpu"):
            assert asyncio.run(both()) == ["cpu", "cuda", "cpu"]
            assert backend.default_device() == "cpu"  # no task's block left behind
    finally:
        tm.set_default_device(None)


def test_a_bad_tinymem_device_names_the_variable_when_no_device_was_given(monkeypatch):
    monkeypatch.setenv("TINYMEM_DEVICE", "gpu")
    tm.set_default_device(None)
    with pytest.raises(tm.DeviceError, match=r"TINYMEM_DEVICE='gpu'.*unknown device 'gpu'.*unset it"):
        tm.zeros(2)
    assert tm.zeros(2, device="cpu").device == "cpu"  # a name given is used, the variable unread


def test_a_thread_given_a_copy_of_a_blocks_context_still_starts_with_the_process_default(standin):
    # Python 3.14's free-threaded builds start a thread with a copy of its starter's context
    # (sys.flags.thread_inherit_context); the block stays its own thread's there too.
    import contextvars
    seen = []
    tm.set_default_device("cuda")
    try:
        with backend.default_device_as("cpu"):
            context = contextvars.copy_context()
            thread = threading.Thread(target=context.run, args=(lambda: seen.append(tm.zeros(1).device),))
            thread.start()
            thread.join()
    finally:
        tm.set_default_device(None)
    assert seen == ["cuda"]


@pytest.mark.parametrize("dtype", ["float16", np.float16, np.dtype("float16")], ids=["name", "type", "dtype"])
def test_to_reads_a_dtype_given_first_as_a_cast_on_tensors_and_modules(dtype):
    # np.float16 and np.dtype('float16') went to the device parser ("unknown device"), and
    # Module.to('float16') too, while Tensor.to('float16') cast (PyTorch's to() takes either)
    assert tm.ones(2, device="cpu").to(dtype).dtype == np.float16
    layer = nn.Linear(2, 2, device="cpu").to(dtype)
    assert layer.weight.dtype == np.float16 and layer.weight.device == "cpu"


@pytest.mark.parametrize("name", ["gpu", "cuda0"])
def test_to_says_a_name_is_neither_a_device_nor_a_dtype(name):
    weight = nn.Linear(2, 2, device="cpu")
    before = weight.weight.data.copy()
    for call in (lambda: tm.ones(2, device="cpu").to(name), lambda: weight.to(name)):
        with pytest.raises(tm.DeviceError, match=f"to\\('{name}'\\): that is neither a device .* nor a dtype"):
            call()
    assert weight.weight.dtype == np.float32 and np.array_equal(weight.weight.data, before)
    with pytest.raises(TypeError, match="names two dtypes"):
        tm.ones(2).to("float16", "float32")
