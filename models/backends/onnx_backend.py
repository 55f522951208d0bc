"""ONNX Runtime backend: fp16 on CUDA when a GPU is usable, fp32 or int8 on CPU otherwise.

The graphs are written at import time by ``models.export`` into ``<model dir>/onnx/``; ONNX Runtime,
given a graph's path, finds the side file of one too large for a single protobuf (``models.onnx_layout``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
import onnxruntime as ort

from ..batching import balanced_slices, split_segments
from ..cpu import signed_int8_is_exact
from ..onnx_layout import FP16, FP32, INT8, TOKEN_TYPES, external_data, has_onnx, onnx_dir
from ..postprocess import load_dense
from ..spec import ModelSpec
from ..tasks import task_of

SIGNED, UNSIGNED = "int8 (u8×s8)", "int8 (u8×u8)"  # the int8 graph's precision, by the kernels it runs on
FP32_ROLE_NAMES = {"qkv": "Q/K/V", "after_gelu": "FFN down", "other": "other"}  # in a partly int8 graph's precision
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
T = TypeVar("T")


def session_options(threads: int) -> ort.SessionOptions:
    options = ort.SessionOptions()
    # Its matmuls use ``threads`` cores; independent graph branches are not worth a second pool.
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # The pool's threads spin within a pass (its many small parallel sections need no wake-ups), but
    # stop as it ends: spinning between passes takes the cores the API workers tokenize and answer on.
    options.add_session_config_entry("session.force_spinning_stop", "1")
    return options


def cuda_session(path: Path, options: ort.SessionOptions) -> ort.InferenceSession | None:
    """A session on the GPU, or None when there is no usable one.

    ``get_available_providers`` lists CUDA whenever the onnxruntime-gpu wheel is installed, even
    on a machine without a GPU or CUDA libraries; ONNX Runtime then logs an error and silently
    falls back to CPU. Only the providers of a created session tell which one really runs.
    """
    if CUDA not in ort.get_available_providers():
        return None
    # CUDA and cuDNN from the nvidia-* wheels (onnxruntime-gpu[cuda,cudnn]) are not on the loader
    # path; this finds them (documented for ORT >= 1.21, a no-op when they are already loaded).
    ort.preload_dlls()
    session = ort.InferenceSession(str(path), options, providers=[CUDA, CPU])
    return session if session.get_providers()[0] == CUDA else None


def cpu_sessions(path: Path, threads: list[int]) -> list[ort.InferenceSession]:
    """The stored CPU graph at ``path``, a session per thread count."""
    return [ort.InferenceSession(str(path), session_options(count), providers=[CPU]) for count in threads]


def unsigned_int8_sessions(path: Path, threads: list[int]) -> list[ort.InferenceSession]:
    """The stored int8 graph with uint8 weights, for CPUs whose u8×s8 kernels saturate (``models.cpu``)."""
    import onnx  # only here: a VNNI machine serves the stored graph as it is

    from ..quantize import unsigned_weights

    return rewritten_sessions(unsigned_weights(onnx.load(str(path))), path, threads)


def partly_int8_sessions(path: Path, threads: list[int], fp32_roles: tuple[str, ...], unsigned: bool) -> list[ort.InferenceSession]:
    """The fp32 graph at ``path`` quantized per token as the stored int8 graph is, but for the MatMuls whose
    inputs play ``fp32_roles`` (``models.quantize``'s), left in fp32: more faithful, slower."""
    import onnx

    from ..quantize import SERVED_POLICY, PerTokenInt8, unsigned_weights

    model = PerTokenInt8(onnx.load(str(path)), {**SERVED_POLICY, **dict.fromkeys(fp32_roles, "fp32")}).rewrite()
    return rewritten_sessions(unsigned_weights(model) if unsigned else model, path, threads)


def rewritten_sessions(model, path: Path, threads: list[int]) -> list[ort.InferenceSession]:
    """Sessions of ``model``, a graph rewritten from the stored one at ``path``."""
    from ..quantize import save_graph

    if not external_data(path).is_file():
        graph = model.SerializeToString()
        return [ort.InferenceSession(graph, session_options(count), providers=[CPU]) for count in threads]
    # Past 2 GiB the rewritten graph cannot be serialized into memory either: it goes to a scratch
    # directory (the store may be read-only), which ONNX Runtime no longer needs once it is loaded.
    with tempfile.TemporaryDirectory(prefix="textbento-int8-") as scratch:
        return cpu_sessions(save_graph(model, Path(scratch) / path.name, single_file_limit=0), threads)


class OnnxBackend:
    """A stored model's ONNX graph in an ONNX Runtime session, loaded once per Encoder process.

    With ``cuda``, ``cuda_graph`` (``fp16``, or ``fp32``) runs on the GPU when one is usable; otherwise ``cpu_graph``
    (``fp32`` or ``int8``) runs on the CPU, int8 with uint8 weights where ``unsigned`` (by default
    where the CPU's flags say ONNX Runtime's u8×s8 kernels saturate, ``models.cpu``), each pass in
    ``Streams``; with ``fp32_roles``, an int8 graph built at load from the fp32 one with those MatMuls left
    in fp32 (``auto``'s fallback where the stored one misses the gates). The int8 graph quantizes each token
    row on its own (``models.quantize``), so a text's result does not depend on its batch mates, and batches
    pad and sort like fp32 ones (docs/design.md, 5).
    """

    trials = ()

    def __init__(
        self,
        model_dir: str | Path,
        spec: ModelSpec,
        threads: int,
        *,
        cpu_graph: str = "fp32",
        cuda: bool = True,
        cuda_graph: str = "fp16",
        unsigned: bool | None = None,
        fp32_roles: tuple[str, ...] = (),
    ) -> None:
        self.spec = spec
        self.task = task_of(spec)  # what the backend answers from the graph's output
        self.dense = load_dense(model_dir, spec.dense)
        directory = onnx_dir(model_dir)
        if not has_onnx(model_dir):
            raise FileNotFoundError(
                f"{directory} has no ONNX export; run: python -m train_import.export_onnx <tag> (or import without --no-onnx)"
            )
        session = cuda_session(directory / {"fp16": FP16, "fp32": FP32}[cuda_graph], session_options(threads)) if cuda else None
        self.device = "cuda" if session else "cpu"
        self.name = "onnx-int8" if self.device == "cpu" and cpu_graph == "int8" else "onnx"
        self.precision = cuda_graph if session else cpu_graph
        self.fidelity = None  # set by ``auto``'s self-check (models.selfcheck)
        self.streams = Streams(session)
        if session is None:
            graph, load = directory / {"fp32": FP32, "int8": INT8}[cpu_graph], cpu_sessions
            if cpu_graph == "int8":
                # uint8 weights where the CPU's flags say u8×s8 kernels saturate, unless told (``unsigned``)
                unsigned = not signed_int8_is_exact() if unsigned is None else unsigned
                self.precision = UNSIGNED if unsigned else SIGNED
                load = unsigned_int8_sessions if unsigned else cpu_sessions
                if fp32_roles:  # built here from the fp32 graph: a fallback of ``auto``'s, not stored
                    self.precision += f", {'/'.join(FP32_ROLE_NAMES[role] for role in fp32_roles)} fp32"
                    graph, load = directory / FP32, partial(partly_int8_sessions, fp32_roles=fp32_roles, unsigned=unsigned)
            self.streams = Streams(*load(graph, [1, threads] if threads > 1 else [1]))

    @property
    def passes_at_once(self) -> int:
        """How many whole passes ``forward_each`` runs at once."""
        return self.streams.count

    def forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """Logits, pooled sentence embeddings, SPLADE weights or token vectors of one padded batch."""
        lengths = np.count_nonzero(attention_mask, axis=1)
        return self.streams.run(partial(self.answer, input_ids, attention_mask, lengths), lengths)

    def forward_each(self, batches: Iterable[tuple[np.ndarray, np.ndarray]]) -> Iterator[np.ndarray]:
        """``forward`` of each padded batch, ``passes_at_once`` of them at once, each whole on one stream."""
        jobs = (partial(self.answer, ids, mask, np.count_nonzero(mask, axis=1), rows=slice(None)) for ids, mask in batches)
        return self.streams.each(jobs)

    def answer(
        self, input_ids: np.ndarray, attention_mask: np.ndarray, lengths: np.ndarray, session: ort.InferenceSession, rows: slice
    ) -> np.ndarray:
        """The answers of a padded batch's ``rows`` by ``session``, cut to the rows' longest (right padding)."""
        width = int(lengths[rows].max())
        ids, mask = input_ids[rows, :width], attention_mask[rows, :width]
        output = session.run(None, graph_inputs(self.spec, ids, mask))[0]
        return self.task.graph_answer(self.spec, output, mask, self.dense, input_ids.shape[1])


class Streams:
    """One padded batch through a session, on the CPU in streams: its rows cut into one contiguous
    slice per core of about as many padded tokens, each run by a single-threaded session on a thread
    of its own, at once.

    A slice needs no synchronisation between cores, which one session's intra-op threads pay at
    every small parallel section: more texts/s than one session with intra-op threads, for less CPU
    (docs/design.md 9). Results do not change: every graph computes each row on
    its own, whatever its batch mates and padding (``models.quantize``), so each slice is also cut
    to its own longest row. A lone text cannot be cut; it gets a session with every core (``wide``).

    A job that waits for many passes (a bulk window) runs them whole instead, one per stream as each
    stream comes free (``each``): no stream waits for the other's slice at the end of every pass.
    """

    def __init__(self, narrow: ort.InferenceSession, wide: ort.InferenceSession | None = None) -> None:
        """``narrow``: a session run by one thread per stream; ``wide``: one with an intra-op thread per
        stream, whose count it gives (none: ``narrow`` alone, as on a GPU or a single core)."""
        self.narrow, self.wide = narrow, wide
        self.count = wide.get_session_options().intra_op_num_threads if wide else 1
        self.pool = ThreadPoolExecutor(self.count, thread_name_prefix="stream") if self.count > 1 else None

    def run(self, compute: Callable[[ort.InferenceSession, slice], np.ndarray], lengths: np.ndarray) -> np.ndarray:
        """``compute``'s answers for the rows of a batch (their token ``lengths``), a slice of rows per
        stream, the slices cut so that they carry about as many padded tokens each (``balanced_slices``)."""
        if self.pool is None or len(lengths) == 1:
            return compute(self.wide or self.narrow, slice(0, len(lengths)))
        slices = balanced_slices(lengths.tolist(), self.count)
        later = [self.pool.submit(compute, self.narrow, part) for part in slices[1:]]
        return np.concatenate([compute(self.narrow, slices[0]), *(future.result() for future in later)])

    def each(self, jobs: Iterable[Callable[[ort.InferenceSession], T]]) -> Iterator[T]:
        """Each job's answer, in order, the jobs run on single-threaded sessions, one per stream at once."""
        if self.pool is None:
            return (job(self.wide or self.narrow) for job in jobs)
        return self.pool.map(lambda job: job(self.narrow), jobs)


def graph_inputs(spec: ModelSpec, input_ids: np.ndarray, attention_mask: np.ndarray) -> dict[str, np.ndarray]:
    """What a stored graph takes for one padded batch, by input name (``models.onnx_layout``)."""
    input_ids, token_type_ids = split_segments(input_ids)
    inputs = {"input_ids": input_ids.astype(np.int64, copy=False), "attention_mask": attention_mask.astype(np.int64, copy=False)}
    if spec.token_types:
        inputs[TOKEN_TYPES] = token_type_ids.astype(np.int64, copy=False)
    return inputs
