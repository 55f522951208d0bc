"""The Encoder call's payload (serving/wire.py): lossless, and one chunk where ndarrays were one each."""

import numpy as np
from _bentoml_impl.serde import PickleSerde

from models.batching import with_segments
from models.inference import Pass
from serving.wire import ids_from_wire, ids_to_wire, rows_from_wire, rows_to_wire


def test_ids_and_rows_come_back_equal():
    ids = [np.arange(5, dtype=np.int32), with_segments(np.array([101, 7, 102, 9, 102], dtype=np.int32), np.array([0, 0, 0, 1, 1]))]
    rows = list(np.random.default_rng(0).standard_normal((3, 384)).astype(np.float32))
    for sent, back in zip(ids, ids_from_wire(ids_to_wire(ids, key=-7, deadline=1234.5))):
        assert (back.key, back.deadline) == (-7, 1234.5) and back.ids.dtype == np.int32 and np.array_equal(back.ids, sent)
    for sent, back in zip(rows, rows_from_wire(rows_to_wire(rows))):
        assert back.dtype == np.float32 and np.array_equal(back, sent)


def test_a_call_is_one_chunk_on_bentomls_pickle():
    """BentoML's own serde: an ndarray per text is a buffer (an HTTP chunk) per text; bytes are not."""
    rows = list(np.ones((64, 384), dtype=np.float32))
    answer = list(zip(rows_to_wire(rows), [Pass(0.0, 1.0, 64, 640, 600)] * 64))
    assert len(PickleSerde().serialize_value(answer).data) == 1
    assert len(PickleSerde().serialize_value(ids_to_wire([np.ones(10, dtype=np.int32)] * 64)).data) == 1
    assert len(PickleSerde().serialize_value(rows).data) == 65  # what the wire format avoids
