import json

import numpy as np
import pytest

from api.responses import json_response, sparse_json


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


def test_sparse_vectors_are_written_as_tei_writes_them_index_by_index():
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((4, 3000)).astype(np.float32) * (rng.random((4, 3000)) < [[0.01], [0.5], [1.0], [0.0]])
    answer = written([sparse_json(vector) for vector in vectors])
    as_objects = [[{"index": index, "value": vector[index]} for index in np.flatnonzero(vector).tolist()] for vector in vectors]
    assert answer == written(as_objects)  # byte for byte, float32 digits included; an all-zero vector: []
    read = json.loads(answer)
    assert read[3] == [] and [entry["index"] for entry in read[0]] == np.flatnonzero(vectors[0]).tolist()
    assert np.array_equal(np.array([entry["value"] for entry in read[2]], dtype=np.float32), vectors[2])


def test_compact_types_and_plain_values_are_written_as_json_numbers():
    payload = {"int8": np.array([[-128, 0, 127]], dtype=np.int8), "ubinary": np.array([[255, 0]], dtype=np.uint8)}
    payload |= {3: "label", "score": 0.25}
    assert json.loads(written(payload)) == {"int8": [[-128, 0, 127]], "ubinary": [[255, 0]], "3": "label", "score": 0.25}


def test_what_json_cannot_hold_is_refused_not_written():
    with pytest.raises(TypeError):
        written({"texts": {"a", "b"}})
