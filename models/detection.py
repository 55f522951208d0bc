"""Reads what a Hugging Face ``save_pretrained`` directory says about its model (import time only): its
architecture, labels, sentence-transformers pipeline, SPLADE and ColBERT settings, and length limits.
Each task's rule (``models.tasks``) reads its model with these to recognise it and work out its spec.

Encoders (BERT, ...) and decoder-only models (Qwen, Llama, Mistral, ...) are served; encoder-decoder
models are not. Sequence classifiers are recognised by their architecture; any other model is served
as an embedder, with pooling, normalisation and length limit taken from the sentence-transformers
files when the directory has them (mean pooling otherwise). A sentence-transformers SparseEncoder
(SPLADE: an MLM and SpladePooling) is served as ``sparse``, a PyLate ColBERT (Transformer and Dense
projections, token by token) as ``multivector``.

Decoders need nothing of their own at serving time: textbento pads on the right, so with causal
attention and position ids counted from 0 in every row (transformers' default: from the cache
position, not the mask), a real token's hidden state is the same as unpadded, and the last real
token of a row is the one the mask says (``models.postprocess``).
"""

from __future__ import annotations

import json
import logging
import string
from pathlib import Path
from typing import Any, NamedTuple

from transformers import PretrainedConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES

from .spec import (
    PASS_MEMORY,
    SPARSE_ACTIVATIONS,
    SPARSE_POOLINGS,
    Activation,
    DenseActivation,
    Pooling,
    Shape,
    SparseActivation,
    SparsePooling,
    Task,
    memory_cap,
    pass_bytes,
    shape_of,
)

progress = logging.getLogger("textbento.import")  # shown by the command lines (train_import/cli.py)


class UnsupportedModel(ValueError):
    """The directory holds something textbento cannot serve; the message says what and why."""


def is_decoder(config: PretrainedConfig) -> bool:
    """Decoder-only: a causal language model's architecture in transformers (or built as a decoder), no encoder.

    BERT-likes also have a causal-LM head in transformers; they count as encoders unless built as decoders.
    """
    if getattr(config, "is_encoder_decoder", False):
        return False
    causal_only = config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES
    # transformers 5 keeps ``is_decoder`` only on the configs that use it (bench/results/stack-transformers5.json).
    return bool(getattr(config, "is_decoder", False)) or causal_only


def check_architecture(config: PretrainedConfig) -> None:
    """Raises ``UnsupportedModel`` unless the model is an encoder-only or decoder-only text model transformers knows."""
    architectures = ", ".join(config.architectures or [config.model_type])
    if config.is_encoder_decoder:
        raise UnsupportedModel(
            f"unsupported architecture {architectures} (model_type {config.model_type!r}): an encoder-decoder model; "
            "textbento serves encoder-only (BERT, ...) and decoder-only (Qwen, Llama, ...) models"
        )
    # Custom code (``auto_map``) is loaded only where the import was told to trust it (``custom_code``).
    if config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not is_decoder(config) and not getattr(config, "auto_map", None):
        raise UnsupportedModel(
            f"unsupported architecture {architectures} (model_type {config.model_type!r}): not a text encoder or decoder "
            "textbento knows (it serves models with a masked- or causal-LM architecture in transformers)"
        )


def read_labels(config: PretrainedConfig) -> tuple[str, ...]:
    """The classifier's labels in logit order."""
    return tuple(str(config.id2label[index]) for index in range(config.num_labels))


def read_activation(config: PretrainedConfig) -> Activation:
    """How the classifier's own library turns its logits into scores.

    transformers' ``problem_type`` says it for multi-label models (a sigmoid per label);
    sentence-transformers' CrossEncoder applies a sigmoid to a single logit; softmax otherwise.
    """
    if config.num_labels == 1 or config.problem_type == "multi_label_classification":
        return "sigmoid"
    return "softmax"


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


# The sentence-transformers modules textbento computes exactly as the library does; anything
# else in a pipeline is refused at import rather than served with different vectors.
REPRODUCED_MODULES = ("Transformer", "Pooling", "Dense", "Normalize")
POOLING_MODES: dict[str, Pooling] = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
# sentence-transformers 6 names the mode (``"pooling_mode": "cls"``) where 5 set one boolean per mode.
POOLING_NAMES: dict[str, Pooling] = {
    "cls": "cls",
    "mean": "mean",
    "max": "max",
    "mean_sqrt_len_tokens": "mean_sqrt_len",
    "weightedmean": "weightedmean",
    "lasttoken": "lasttoken",
}
# sentence-transformers saves a Dense module's activation by its torch class's full name.
TORCH_ACTIVATIONS: dict[str, DenseActivation] = {
    "torch.nn.modules.linear.Identity": "identity",
    "torch.nn.modules.activation.Tanh": "tanh",
    "torch.nn.modules.activation.ReLU": "relu",
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
}


def read_pooling(config: dict[str, Any]) -> Pooling:
    """The one pooling mode of a sentence-transformers Pooling config (5.x or 6.x); others are refused by name."""
    if "pooling_mode" in config:  # 6.x: a name, or a list of names pooled side by side
        named = config["pooling_mode"]
        modes = [named] if isinstance(named, str) else list(named or [])
        if len(modes) != 1 or modes[0] not in POOLING_NAMES:
            raise UnsupportedModel(
                f"sentence-transformers pooling {' + '.join(map(str, modes)) or 'with no mode'} is not reproduced by textbento "
                f"(it pools with exactly one of: {', '.join(POOLING_NAMES)})"
            )
        return POOLING_NAMES[modes[0]]
    modes = [key for key, value in config.items() if key.startswith("pooling_mode_") and value]
    if len(modes) != 1 or modes[0] not in POOLING_MODES:
        raise UnsupportedModel(
            f"sentence-transformers pooling {' + '.join(modes) or 'with no mode'} is not reproduced by textbento "
            f"(it pools with exactly one of: {', '.join(POOLING_MODES)})"
        )
    return POOLING_MODES[modes[0]]


# A SparseEncoder textbento reproduces is exactly these modules, in this order (``models.heads.SpladeEncoder``);
# others (SparseStaticEmbedding and the Router of inference-free SPLADE, SparseAutoEncoder of CSR) are refused.
SPLADE_MODULES = ("MLMTransformer", "SpladePooling")


def module_kind(module: dict[str, Any]) -> str:
    """A modules.json entry's class name, e.g. ``Pooling`` for ``sentence_transformers.models.Pooling``."""
    return module.get("type", "").rsplit(".", 1)[-1]


def is_sparse_encoder(model_dir: Path) -> bool:
    """Whether sentence-transformers saved the directory as a SparseEncoder (its config says so, or its modules)."""
    settings = _read_json(model_dir / "config_sentence_transformers.json") or {}
    modules = _read_json(model_dir / "modules.json") or []
    return settings.get("model_type") == "SparseEncoder" or any(".sparse_encoder." in module.get("type", "") for module in modules)


def read_splade(model_dir: Path, config: PretrainedConfig) -> tuple[SparsePooling, SparseActivation]:
    """The SpladePooling settings of a SparseEncoder whose pipeline textbento reproduces; others refused by name."""
    modules = _read_json(model_dir / "modules.json") or []
    if unreproduced := [module for module in modules if module_kind(module) not in SPLADE_MODULES]:
        named = ", ".join(f"{module.get('path') or module.get('name')!r} ({module.get('type')})" for module in unreproduced)
        raise UnsupportedModel(
            f"SparseEncoder modules {named} are not reproduced by textbento (it serves SPLADE as "
            f"{' + '.join(SPLADE_MODULES)}): serving without them would give different vectors"
        )
    if [module_kind(module) for module in modules] != list(SPLADE_MODULES):
        raise UnsupportedModel(
            f"a SparseEncoder is served as exactly {' + '.join(SPLADE_MODULES)}, in that order; this one's modules.json has "
            f"{' + '.join(module_kind(module) for module in modules) or 'none'}"
        )
    if not any(name.endswith("ForMaskedLM") for name in config.architectures or []):
        raise UnsupportedModel(
            "a SPLADE model needs a *ForMaskedLM architecture (its MLM head); "
            f"this one is {', '.join(config.architectures or [config.model_type])}"
        )
    pooling = _read_json(model_dir / modules[1].get("path", "") / "config.json") or {}
    strategy, activation = pooling.get("pooling_strategy", "max"), pooling.get("activation_function", "relu")
    if strategy not in SPARSE_POOLINGS or activation not in SPARSE_ACTIVATIONS:
        raise UnsupportedModel(
            f"SpladePooling with pooling_strategy {strategy!r} and activation_function {activation!r} is not reproduced by textbento"
        )
    return strategy, activation


# PyLate's ColBERT: the encoder, then Dense projections applied to every token (pylate.models.Dense,
# or sentence-transformers' own, which PyLate converts), then each token vector to unit length.
COLBERT_MODULES = ("Transformer", "Dense")
# PyLate's defaults where its config_sentence_transformers.json leaves a setting out (pylate 1.6, models/colbert.py).
COLBERT_DEFAULTS = {
    "query_prefix": "[Q] ",
    "document_prefix": "[D] ",
    "query_length": 32,
    "document_length": 180,
    "do_query_expansion": True,
    "attend_to_expansion_tokens": False,
    "skiplist_words": list(string.punctuation),
}


def is_colbert(model_dir: Path) -> bool:
    """Whether PyLate saved the directory as a ColBERT model (its config says so, or its modules)."""
    settings = _read_json(model_dir / "config_sentence_transformers.json") or {}
    modules = _read_json(model_dir / "modules.json") or []
    return settings.get("model_type") == "ColBERT" or any(module.get("type", "").startswith("pylate.") for module in modules)


class ColbertSettings(NamedTuple):
    """What a PyLate ColBERT's files say beyond its Dense layers (``ModelSpec`` names each)."""

    query_length: int
    document_length: int
    query_prefix_id: int | None
    document_prefix_id: int | None
    expansion_id: int | None
    attend_to_expansion: bool
    skiplist: tuple[int, ...]


def read_colbert(model_dir: Path, tokenizer: Any) -> ColbertSettings:
    """A PyLate ColBERT's settings, as PyLate reads them (its defaults for what is left out), the
    prefixes and the skiplist as the tokenizer's ids; a pipeline textbento would compute otherwise is refused."""
    modules = _read_json(model_dir / "modules.json") or []
    kinds = [module_kind(module) for module in modules]
    if not kinds or kinds[0] != "Transformer" or len(kinds) < 2 or set(kinds[1:]) != {"Dense"}:
        raise UnsupportedModel(
            f"a ColBERT model is served as {' + '.join(COLBERT_MODULES)} (one Dense or more); this one's modules.json has "
            f"{' + '.join(kinds) or 'none'}"
        )
    for module in modules[1:]:
        if (_read_json(model_dir / module.get("path", "") / "config.json") or {}).get("use_residual"):
            raise UnsupportedModel(f"PyLate Dense module {module.get('path')!r} with use_residual is not reproduced by textbento")
    settings = {
        **COLBERT_DEFAULTS,
        **{key: value for key, value in (_read_json(model_dir / "config_sentence_transformers.json") or {}).items() if value is not None},
    }

    def prefix_id(name: str) -> int | None:
        prefix = settings[name]
        if prefix == "":
            return None
        token = tokenizer.convert_tokens_to_ids(prefix)
        if token is None or token == tokenizer.unk_token_id:
            raise UnsupportedModel(
                f"the ColBERT {name} {prefix!r} is not a token of the model's tokenizer (PyLate adds it when it saves the model)"
            )
        return int(token)

    # The id a query is padded with up to its length: the MASK token, else the EOS, else the pad token, as PyLate pads.
    padding = next(
        (token for token in (tokenizer.mask_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) if token is not None), None
    )
    expansion = bool(settings["do_query_expansion"])
    if expansion and padding is None:
        raise UnsupportedModel("a ColBERT model with query expansion needs a MASK, EOS or pad token to expand queries with")
    return ColbertSettings(
        query_length=int(settings["query_length"]),
        document_length=int(settings["document_length"]),
        query_prefix_id=prefix_id("query_prefix"),
        document_prefix_id=prefix_id("document_prefix"),
        expansion_id=padding if expansion else None,
        attend_to_expansion=expansion and bool(settings["attend_to_expansion_tokens"]),
        skiplist=tuple(sorted({int(tokenizer.convert_tokens_to_ids(word)) for word in settings["skiplist_words"]})),
    )


class SentenceTransformersSettings(NamedTuple):
    pooling: Pooling = "mean"
    normalize: bool = False
    max_seq_length: int | None = None
    prompts: dict[str, str] = {}
    default_prompt_name: str | None = None
    dense: tuple[tuple[str, DenseActivation, int], ...] = ()  # (module folder, activation, out_features)


def check_on_sentence_embedding(config: dict[str, Any], path: str) -> None:
    """sentence-transformers 6 modules name what they read and write; textbento applies Dense and
    Normalize to the pooled sentence embedding, as 5.x always did."""
    for key in ("module_input_name", "module_output_name"):
        if config.get(key, "sentence_embedding") != "sentence_embedding":
            raise UnsupportedModel(
                f"sentence-transformers module {path!r} with {key} {config[key]!r} is not reproduced by textbento "
                "(it applies Dense and Normalize to the pooled sentence_embedding)"
            )


def read_dense(model_dir: Path, path: str) -> tuple[str, DenseActivation, int]:
    config = _read_json(model_dir / path / "config.json") or {}
    check_on_sentence_embedding(config, path)
    name = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    if name not in TORCH_ACTIVATIONS:
        raise UnsupportedModel(
            f"sentence-transformers Dense activation {name} in {path!r} is not reproduced by textbento "
            f"(only {', '.join(TORCH_ACTIVATIONS)})"
        )
    if "out_features" not in config:
        raise UnsupportedModel(f"sentence-transformers Dense module {path!r} has no config.json with out_features")
    return path, TORCH_ACTIVATIONS[name], int(config["out_features"])


def check_transformer(config: dict[str, Any]) -> None:
    """sentence-transformers 6 records what the Transformer module runs; textbento runs the encoder's
    last hidden state as token embeddings (5.x's only way)."""
    computed = config.get("transformer_task", "feature-extraction")
    output = (config.get("modality_config") or {}).get("text", {}).get("method_output_name", "last_hidden_state")
    if (computed, output) != ("feature-extraction", "last_hidden_state"):
        raise UnsupportedModel(
            f"sentence-transformers Transformer module with transformer_task {computed!r} and output {output!r} is not "
            "reproduced by textbento (it serves feature-extraction from the last hidden state)"
        )


def read_sentence_transformers(model_dir: Path) -> SentenceTransformersSettings:
    """The embedding pipeline from sentence-transformers files; defaults (mean pooling) without them.

    Raises ``UnsupportedModel`` for a pipeline textbento would compute differently: a module it
    does not reproduce (LayerNorm, CNN, ...), several pooling modes at once, a Dense activation it
    lacks, or pooling that leaves the prompt out.
    """
    modules = _read_json(model_dir / "modules.json") or []
    pooling: Pooling = "mean"
    normalize = False
    dense = []
    for module in modules:
        kind = module_kind(module)
        if kind not in REPRODUCED_MODULES:
            raise UnsupportedModel(
                f"sentence-transformers module {module.get('path') or module.get('name')!r} ({module.get('type')}) "
                f"is not reproduced by textbento (only {', '.join(REPRODUCED_MODULES)}): serving without it "
                "would give different vectors"
            )
        if kind == "Pooling":
            pooling_config = _read_json(model_dir / module.get("path", "") / "config.json") or {}
            pooling = read_pooling(pooling_config)
            if not pooling_config.get("include_prompt", True):
                raise UnsupportedModel("sentence-transformers pooling with include_prompt: false is not reproduced by textbento")
        if kind == "Dense":
            dense.append(read_dense(model_dir, module.get("path", "")))
        if kind == "Normalize":
            check_on_sentence_embedding(_read_json(model_dir / module.get("path", "") / "config.json") or {}, module.get("path", ""))
            normalize = True
        if kind == "Transformer":
            check_transformer(_read_json(model_dir / module.get("path", "") / "sentence_bert_config.json") or {})
    return SentenceTransformersSettings(pooling, normalize, *read_length_and_prompts(model_dir), tuple(dense))


def read_length_and_prompts(model_dir: Path) -> tuple[int | None, dict[str, str], str | None]:
    """sentence-transformers' ``max_seq_length``, prompts and default prompt name (SentenceTransformer and SparseEncoder alike)."""
    settings = _read_json(model_dir / "config_sentence_transformers.json") or {}
    sbert_config = _read_json(model_dir / "sentence_bert_config.json") or {}
    prompts = {str(name): str(text) for name, text in (settings.get("prompts") or {}).items()}
    return sbert_config.get("max_seq_length"), prompts, settings.get("default_prompt_name") or None


class Lengths(NamedTuple):
    """How long a text the model reads (``own``: what ``--max-length`` may go up to), the longest whose
    pass fits memory (``cap``: ``models.spec.memory_cap`` of its ``shape``), and the import's ``--max-length`` if given."""

    own: int
    cap: int
    chosen: int | None
    shape: Shape

    def served(self, preferred: int | None = None) -> int:
        """The cap served: ``--max-length`` where given, else the model's ``preferred`` length
        (sentence-transformers' ``max_seq_length``, a ColBERT's document length) within the memory cap."""
        if self.chosen is not None:
            return self.chosen
        wanted = min(preferred or self.own, self.own)
        if self.cap < wanted:
            progress.info(
                "serving at most %d tokens per text of the model's %d: one pass of %d would hold about %.1f GiB, past %.0f GiB "
                "(--max-length raises it, up to %d)",
                self.cap,
                wanted,
                wanted,
                pass_bytes(wanted, self.shape) / 2**30,
                PASS_MEMORY / 2**30,
                self.own,
            )
        return min(wanted, self.cap)


def read_lengths(config: PretrainedConfig, tokenizer_limit: int, chosen: int | None, task: Task) -> Lengths:
    """The model's own limit (the tokenizer's, unless it is a placeholder larger than the position table),
    its memory cap, and ``chosen`` (``--max-length``) checked against the limit."""
    positions = getattr(config, "max_position_embeddings", None) or 512
    own = min(tokenizer_limit, positions)
    if chosen is not None and chosen > own:
        raise UnsupportedModel(f"--max-length {chosen} is past the model's limit of {own} tokens")
    shape = shape_of(config.to_dict(), task)
    cap = memory_cap(own, shape)
    if chosen is not None and chosen > cap:
        progress.warning(
            "--max-length %d: one pass of a text that long holds about %.1f GiB, past the %.0f GiB the default cap (%d) keeps to",
            chosen,
            pass_bytes(chosen, shape) / 2**30,
            PASS_MEMORY / 2**30,
            cap,
        )
    return Lengths(own, cap, chosen, shape)


def read_pad_id(config: PretrainedConfig, reads_pad_id: bool, pad: int | None, eos: int | None) -> int:
    """The id textbento pads rows with; only a decoder whose head ``reads_pad_id`` (a classifier's) cares which.

    transformers scores a decoder's ``*ForSequenceClassification`` at each row's last id that is not
    ``config.pad_token_id`` (Qwen3, Llama, Mistral alike), and refuses batches without one: rows are
    padded with that id, which the import sets from the tokenizer's pad token, else its EOS, when the
    config has none (as one does to batch them with transformers).
    """
    if not (reads_pad_id and is_decoder(config)):
        return pad or 0
    chosen = next((token for token in (config.pad_token_id, pad, eos) if token is not None), None)
    if chosen is None:
        raise UnsupportedModel(
            "a decoder classifier needs a pad token to find each row's last token, "
            "and neither its config nor its tokenizer has a pad or EOS token"
        )
    return chosen


def read_colbert_dense(model_dir: Path) -> list[tuple[str, DenseActivation, int]]:
    """A PyLate ColBERT's Dense projections, in order: every module after its Transformer."""
    return [read_dense(model_dir, module.get("path", "")) for module in (_read_json(model_dir / "modules.json") or [])[1:]]


def custom_code(model_dir: Path) -> dict[str, str]:
    """A model whose config names classes in Python files (``auto_map``): each of its files with its SHA-256,
    and each class it names in another repository (``org/repo--module.Class``, as nomic-embed's config
    does), which transformers fetches when the code first runs; {} for a model without custom code."""
    import hashlib

    config = model_dir / "config.json"
    auto_map = json.loads(config.read_text()).get("auto_map") if config.is_file() else None
    if not auto_map:
        return {}
    named = [name for names in auto_map.values() for name in ([names] if isinstance(names, str) else names) if name]
    elsewhere = {name: "in another repository: fetched by transformers at import" for name in named if "--" in name}
    return {**{path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(model_dir.glob("*.py"))}, **elsewhere}
