"""Stored model → ONNX files inside the same BentoML model directory.

Everything lands in ``<model dir>/onnx/`` (``models.onnx_layout``): ``model.onnx`` (fp32),
``model-int8.onnx`` (per-token dynamic int8 of it, ``models.quantize``) and ``model-fp16.onnx``
(fp16 weights and compute, float32 output, for CUDA). A graph whose weights are too large for one
protobuf (past ``SINGLE_FILE_LIMIT``, 1,920 MiB: a Qwen3-0.6B's fp32 graph) keeps them in one side file
beside it, ``<graph>.data``.

Every graph takes ``input_ids`` and ``attention_mask`` (int64, ``[batch, sequence]``, both axes
dynamic) and has one output: ``logits`` ``[batch, labels]`` for classifiers, ``last_hidden_state``
``[batch, sequence, dim]`` for embedders, ``sparse_embedding`` ``[batch, vocabulary]`` for SPLADE
models (``models.heads``: pooled inside, their ``[batch, sequence, vocabulary]`` logits are too large
to leave it), ``token_embeddings`` ``[batch, sequence, dim]`` for multi-vector models (projected and
normalised inside). Dense pooling stays out of the graph: ``models.postprocess`` pools for every backend,
at a small share of the forward pass, and pooling inside the graph was within noise of it.

The fp32 graph is held to the model on inputs of other shapes than the export's example before the
others are made from it (``check_traced``); decoders' masks are traced without ``torch.vmap``
(``broadcast_mask``).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import onnx
import torch

from .onnx_layout import FP16, FP32, INPUTS, INT8, SINGLE_FILE_LIMIT, TOKEN_TYPES, onnx_dir
from .quantize import quantize_fp16, quantize_int8, save_graph
from .spec import ModelSpec
from .tasks import task_of

progress = logging.getLogger("textbento.import")

# One warning per torchvision operator on every export ("torchvision is not installed"): not used here.
logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)


def broadcast_mask(
    batch_size: int,
    cache_position: torch.Tensor | None = None,
    kv_length: int = 0,
    kv_offset: int = 0,
    mask_function: Callable | None = None,
    attention_mask: torch.Tensor | None = None,
    q_length: int | None = None,
    q_offset: int = 0,
    **_: object,
) -> torch.Tensor:
    """transformers' boolean ``[batch, 1, query, key]`` attention mask (``masking_utils.sdpa_mask``),
    always built, from traced ops only.

    ``sdpa_mask`` returns no mask where the example batch has no padding (the traced graph would then
    ignore padding), and some models build theirs by vmapping an elementwise mask function over
    index grids (decoders in transformers 4.x, Gemma 3's bidirectional mask in 5.x), which the
    TorchScript tracer cannot follow (``RuntimeError: unordered_map::at``). The functions are
    elementwise (``kv <= q``, ``padding[b, kv]``, sliding windows), so calling them once on broadcast
    index grids computes the same mask. The query positions come as ``cache_position`` (4.x) or as
    ``q_length`` and ``q_offset`` (5.x).
    """
    from transformers.masking_utils import and_masks, causal_mask_function, padding_mask_function

    mask_function = mask_function or causal_mask_function
    if attention_mask is not None:  # padded to every key position, as sdpa_mask does
        extra = kv_length + kv_offset - attention_mask.shape[-1]
        padding = torch.nn.functional.pad(attention_mask, (0, extra)) if extra > 0 else attention_mask
        mask_function = and_masks(mask_function, padding_mask_function(padding))
    if cache_position is None:
        cache_position = torch.arange(q_length) + q_offset
    device = cache_position.device
    batch = torch.arange(batch_size, device=device)[:, None, None, None]
    head = torch.zeros(1, 1, 1, 1, dtype=torch.long, device=device)
    query = cache_position[None, None, :, None]
    key = (torch.arange(kv_length, device=device) + kv_offset)[None, None, None, :]
    return mask_function(batch, head, query, key).expand(batch_size, 1, cache_position.shape[0], kv_length)


@contextlib.contextmanager
def traceable_masks() -> Iterator[None]:
    """transformers' masks built by ``broadcast_mask`` while exporting (eager attention's mask calls ``sdpa_mask``)."""
    from transformers import masking_utils

    with mock.patch.object(masking_utils, "sdpa_mask", broadcast_mask):
        yield


def export_fp32(
    model_dir: str | Path, spec: ModelSpec, target: Path, *, single_file_limit: int = SINGLE_FILE_LIMIT, trust_remote_code: bool = False
) -> Path:
    """The fp32 ONNX graph of the ``save_pretrained`` model in ``model_dir``, with dynamic batch and sequence.

    The TorchScript exporter (``dynamo=False``), with eager attention. It is deprecated in torch
    2.13 but still the faster graph on ONNX Runtime's CPU kernels, fp32 and int8 alike, measured side by
    side (docs/design.md 5). ONNX Runtime's transformer fusions (fused ``Attention``) made it slower.
    """
    task = task_of(spec)
    loader = task.model_class()
    model = loader.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="eager", trust_remote_code=trust_remote_code)
    model = built_by_its_code(model) if trust_remote_code else model.eval()
    model.config.use_cache = False  # a decoder's key/value cache is for generation: not an output here
    # Distinct example tensors, one row padded, so that the mask is really used.
    input_ids = torch.arange(100, 116, dtype=torch.int64).reshape(2, 8)
    attention_mask = torch.ones(2, 8, dtype=torch.int64)
    attention_mask[1, 5:] = 0
    inputs = (*INPUTS, TOKEN_TYPES) if spec.token_types else INPUTS
    examples = (input_ids, attention_mask, (input_ids % 2)) if spec.token_types else (input_ids, attention_mask)
    axes = {name: {0: "batch", 1: "sequence"} for name in inputs}
    axes[task.graph_output] = {0: "batch", 1: "sequence"} if task.per_token_output else {0: "batch"}
    target.parent.mkdir(parents=True, exist_ok=True)
    # In eval mode for good: the exporter puts a module back in the mode it found it in, dropout included.
    module = task.graph_module(model, spec, model_dir).eval()
    # Past 2 GiB the exporter writes the weights to files of its own naming beside the graph: written
    # aside, then saved as the other graphs are (``save_graph``), in one file or with one side file.
    with tempfile.TemporaryDirectory(prefix=".export-", dir=target.parent) as scratch:
        traced = Path(scratch) / target.name
        with warnings.catch_warnings(), torch.no_grad(), traceable_masks():
            warnings.simplefilter("ignore")  # export-time deprecation chatter from torch and transformers
            torch.onnx.export(
                module,
                examples,
                str(traced),
                dynamo=False,
                input_names=list(inputs),
                output_names=[task.graph_output],
                dynamic_axes=axes,
                opset_version=17,
            )
        check_traced(module, traced, spec)
        return save_graph(onnx.load(str(traced)), target, single_file_limit)


def built_by_its_code(model: torch.nn.Module) -> torch.nn.Module:
    """A custom-code model built by its own code (its ``__init__``), with the weights transformers loaded.

    transformers 5 loads a model by building it without memory and then filling in what the checkpoint
    holds: a non-persistent buffer that code written for transformers 4 computes in ``__init__`` (a rotary
    frequency table, say) is left uninitialised, and the traced graph would bake in whatever memory held.
    """
    built = type(model)(model.config)
    built.load_state_dict(model.state_dict())
    return built.eval()


class UntraceableModel(RuntimeError):
    """The exported graph computes something else than the model on inputs of another shape."""


def check_traced(module: torch.nn.Module, graph: Path, spec: ModelSpec) -> None:
    """The graph at ``graph`` held to the model on batches of other shapes than the export's example.

    The tracer records one run: a path that depends on the data exports without an error and then
    fails or differs on other inputs (a Qwen3-MoE's expert routing: the loop over the experts the
    example reached is unrolled, so one token, which reaches fewer, fails in a ``Split``). Compared
    on the real tokens, relative to the output's scale: a padded batch of three and one token alone.
    """
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4  # a graph that fails here is reported once, by the import, not logged by ONNX Runtime too
    session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    input_ids = (torch.arange(33, dtype=torch.int64).reshape(3, 11) * 7 + 3) % module.model.get_input_embeddings().num_embeddings
    attention_mask = torch.ones(3, 11, dtype=torch.int64)
    attention_mask[1, 4:] = 0
    attention_mask[2, 9:] = 0
    for ids, mask in ((input_ids, attention_mask), (input_ids[:1, :1], attention_mask[:1, :1])):
        feed = {"input_ids": ids, "attention_mask": mask, **({TOKEN_TYPES: ids % 2} if spec.token_types else {})}
        with torch.no_grad():
            expected = module(**feed).numpy()
        try:
            exported = session.run(None, {name: tensor.numpy() for name, tensor in feed.items()})[0]
        except Exception as error:  # ONNX Runtime raises its own types (InvalidArgument, Fail, ...)
            raise UntraceableModel(
                f"the traced graph fails on a batch of shape {tuple(ids.shape)}: the model takes a path that depends on its input"
            ) from error
        real = mask.numpy() == 1 if task_of(spec).per_token_output else slice(None)
        error = np.abs(exported - expected)[real].max() / max(np.abs(expected[real]).max(), 1.0)
        if error > 1e-3:
            raise UntraceableModel(
                f"the traced graph differs from the model on a batch of shape {tuple(ids.shape)} (relative error {error:.2g}): "
                "the model takes a path that depends on its input"
            )


def export_model(
    model_dir: str | Path, spec: ModelSpec, *, single_file_limit: int = SINGLE_FILE_LIMIT, trust_remote_code: bool = False
) -> list[Path]:
    """Writes the fp32, int8 and fp16 graphs into ``<model_dir>/onnx/``; returns their paths.

    Each graph whose weights pass ``single_file_limit`` bytes keeps them in its side file (``models.onnx_layout``);
    ``trust_remote_code`` runs a custom-code model's code (``models.detection.custom_code``) to trace it.
    """
    directory = onnx_dir(model_dir)
    progress.info("exporting the fp32 ONNX graph")
    fp32 = export_fp32(model_dir, spec, directory / FP32, single_file_limit=single_file_limit, trust_remote_code=trust_remote_code)
    progress.info("quantizing to per-token int8 (CPU)")
    int8 = quantize_int8(fp32, directory / INT8, single_file_limit=single_file_limit)
    progress.info("converting to fp16 (CUDA)")
    return [fp32, int8, quantize_fp16(fp32, directory / FP16, single_file_limit=single_file_limit)]
