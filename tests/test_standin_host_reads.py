"""Host reads of device arrays are explicit: each place that needs host values (a histogram, a
byte count, a JSON record, an index given as a NumPy array) copies with ``backend.to_numpy`` or
moves the index to the device, and runs on "cuda" as on the CPU. Each test ran into CuPy's
"Implicit conversion to a NumPy array is not allowed" (or its refusal of a NumPy index) on the
strict stand-in before its fix."""
import json

import numpy as np
import pytest

import tinymem as tm
from tinymem import backend
from tinymem.experiments import lora, precision
from tinymem.measure.records import read_records, write_records


def test_a_record_holding_a_device_array_is_written_as_its_values(standin, tmp_path):
    values = standin.asarray(np.array([[1.5, 2.0], [3.0, 4.0]], np.float32))
    write_records({"values": values, "total": values.sum()}, str(tmp_path), "r")
    assert json.loads((tmp_path / "data" / "r.json").read_text()) == {"values": [[1.5, 2.0], [3.0, 4.0]], "total": 10.5}
    assert read_records(str(tmp_path), "r")["values"] == [[1.5, 2.0], [3.0, 4.0]]


def test_the_precision_probe_samples_a_device_gradient_on_the_host(standin):
    sink = []
    x = tm.tensor(np.arange(-10, 11, dtype=np.float32), requires_grad=True)
    (precision._GradProbe.apply(x * 1.0, sink=sink) * 2.0).sum().backward()
    assert type(sink[0]) is np.ndarray and sink[0].tolist() == [2.0] * 3  # |g| = 2, every 7th of 21


def test_the_frozen_formats_count_the_same_bytes_on_either_device(standin):
    on_cuda = lora.frozen_formats((64, 32))
    with backend.default_device_as("cpu"):
        assert lora.frozen_formats((64, 32)) == on_cuda
    assert on_cuda["bytes_per_weight"]["int8"] == pytest.approx(1 + 4 / 32)  # int8 codes + a float32 scale per row


@pytest.mark.parametrize("index", [np.array([0, 2, 0]), (slice(None), np.array([1, 1, 3]))])
def test_a_numpy_index_array_selects_on_a_device_tensor_with_its_gradient(standin, index):
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = tm.tensor(values, requires_grad=True)
    y = x[index]
    (y * 2.0).sum().backward()
    expected = np.zeros_like(values)
    np.add.at(expected, index, 2.0)
    assert backend.device_of(y.data) == "cuda"
    np.testing.assert_array_equal(backend.to_numpy(y.data), values[index])
    np.testing.assert_array_equal(backend.to_numpy(x.grad.data), expected)
