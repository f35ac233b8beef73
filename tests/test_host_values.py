"""Host values of anything a figure family keeps: ``backend.to_numpy`` of a Tensor is its values
(it was a 0-d object array holding the Tensor), None is refused (it was an object array holding
None); a record holding a Tensor is written as its values, and a record JSON cannot hold leaves
no ``.tmp`` file behind and the previous records as they were."""
import json

import numpy as np
import pytest

import tinymem as tm
from tinymem import backend
from tinymem.measure.records import read_records, write_records


def test_to_numpy_of_a_tensor_is_its_values(device):
    values = np.array([[1.5, -2.0], [0.25, 4.0]], np.float32)
    host = backend.to_numpy(tm.tensor(values, device=device, requires_grad=True))
    assert type(host) is np.ndarray and host.dtype == np.float32
    np.testing.assert_array_equal(host, values)


def test_to_numpy_refuses_none():
    with pytest.raises(TypeError, match="to_numpy: got None"):
        backend.to_numpy(None)


def test_a_record_holding_a_tensor_is_written_as_its_values(device, tmp_path):
    loss = tm.tensor([0.5, 0.25], device=device)
    write_records({"losses": loss, "last": loss[1]}, str(tmp_path), "r")
    assert read_records(str(tmp_path), "r") == {"losses": [0.5, 0.25], "last": 0.25}


def test_a_record_json_cannot_hold_leaves_no_file_behind(tmp_path):
    write_records({"a": 1}, str(tmp_path), "r")
    with pytest.raises(TypeError, match="set is not JSON serializable"):
        write_records({"a": 2, "b": {1, 2}}, str(tmp_path), "r")
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["r.json"]
    assert json.loads((tmp_path / "data" / "r.json").read_text()) == {"a": 1}
