import json

import numpy as np
import pytest

from api.responses import json_response


def written(payload) -> str:
    return json_response(payload).body.decode()


def test_a_float32_is_written_with_the_fewest_digits_that_read_back_as_itself():
    assert written({"embedding": np.array([0.1, -2.5e-8, 1.0], dtype=np.float32)}) == '{"embedding":[0.1,-2.5e-8,1.0]}'
    assert written([{"index": 7, "value": np.float32(0.1)}]) == '[{"index":7,"value":0.1}]'  # a sparse weight


def test_vectors_read_back_as_the_same_float32s_whole_or_cut_to_fewer_dimensions():
    rows = np.random.default_rng(0).standard_normal((8, 384)).astype(np.float32)
    cut = rows[:, :64]  # a view that is not C-contiguous: written through its list
    assert not cut.flags.c_contiguous
    for vectors in (rows, cut, list(rows)):
        read = np.array(json.loads(written(vectors)), dtype=np.float32)
        assert np.array_equal(read, np.asarray(vectors)), "a float32 changed on its way through JSON"


def test_compact_types_and_plain_values_are_written_as_json_numbers():
    payload = {"int8": np.array([[-128, 0, 127]], dtype=np.int8), "ubinary": np.array([[255, 0]], dtype=np.uint8)}
    payload |= {3: "label", "score": 0.25}
    assert json.loads(written(payload)) == {"int8": [[-128, 0, 127]], "ubinary": [[255, 0]], "3": "label", "score": 0.25}


def test_what_json_cannot_hold_is_refused_not_written():
    with pytest.raises(TypeError):
        written({"texts": {"a", "b"}})
