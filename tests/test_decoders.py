"""Decoder-only models served: embedders as sentence-transformers configures them, rerankers as transformers scores them.

Tiny random-weight Qwen3, Llama, Mistral, Gemma 3 and GPT-2 models, with a byte-level BPE that appends
its EOS to every text as Qwen3-Embedding's does (``harness.testmodels``). Embedders are sentence-transformers
pipelines (last-token or mean pooling, Dense, Normalize, prompts), saved with either padding side,
imported through the store and held to ``SentenceTransformer.encode`` within 1e-5 on the torch and ONNX
backends; a text's vector is the same alone and inside one padded pass of others (textbento pads on the
right: position ids count from 0 in every row, so a causal model's real tokens never see the padding).
One-logit ``Qwen3ForSequenceClassification`` rerankers are held to transformers' logits on pairs; a
mixture of experts, whose traced graph is wrong, is served by torch; an encoder-decoder is still
refused; an embedder and a reranker are served for real.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import shutil
from pathlib import Path
from typing import NamedTuple

import bentoml
import numpy as np
import onnx
import pytest
import requests
import torch
from onnx import numpy_helper
from sentence_transformers import SentenceTransformer, models
from transformers import (
    AutoModel,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    Gemma3TextConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    Qwen3Config,
    Qwen3MoeConfig,
    T5Config,
    T5ForConditionalGeneration,
)

from harness.testmodels import build_decoder, build_decoder_tokenizer
from models import cpu
from models.backends import load_backend
from models.batching import pad, split_segments
from models.detection import UnsupportedModel
from models.onnx_layout import FP16, FP32, INT8, has_onnx, onnx_dir
from models.spec import ModelSpec
from models.store import import_model, load_tokenizer
from models.tokenization import TextTokenizer
from tests.conftest import running
from tests.reference import assert_served_as_in_process, backend_outputs
from tests.test_onnx import HARD_TEXTS, cosines, varied_sentences

# 2 to 64 tokens (max_length; nine are cut to it): inside and far past the sliding window (8) of Mistral and Gemma 3.
TEXTS = ["a", "ok", "Hi!", "BentoML serves models.", *HARD_TEXTS[10:20], *varied_sentences(12, seed=3), HARD_TEXTS[-1]]
PAIRS = [
    ("how do I reset my password", "Open settings, then security, then reset password."),
    ("how do I reset my password", "Bananas are rich in potassium."),
    ("ok", "ok"),
    ("Déjà vu 🙂", "The weather is fine today. " * 60),  # cut to max_length, the longer text first
    ("x = f(y) + 3;", "?"),
]
SMALL = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,  # grouped-query attention, as Qwen3 and Llama 3 have
    "head_dim": 8,
    "intermediate_size": 64,
    "max_position_embeddings": 256,
}
ARCHITECTURES = {
    "qwen3": (Qwen3Config, {}),
    "llama": (LlamaConfig, {}),
    "mistral": (MistralConfig, {"sliding_window": 8}),  # a window shorter than most texts here
    "gemma3": (Gemma3TextConfig, {"sliding_window": 8, "use_bidirectional_attention": True}),  # EmbeddingGemma's
    "gpt2": (GPT2Config, {}),  # absolute positions: right padding must leave them as unpadded
    "qwen3-moe": (Qwen3MoeConfig, {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16}),
}
QWEN3_PROMPTS = {"query": "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:", "document": ""}


class Pipeline(NamedTuple):
    architecture: str
    pooling: str
    dense: str  # "", "tanh" (one Dense), or "gemma" (EmbeddingGemma's two, no bias, no activation)
    padding_side: str
    default_prompt: str | None = None


PIPELINES = {
    # Qwen3-Embedding's shape: the last token (its appended EOS), Normalize, an instruction prompt, left padding.
    "qwen3-lasttoken": Pipeline("qwen3", "lasttoken", "", "left", "query"),
    "qwen3-mean-dense": Pipeline("qwen3", "mean", "tanh", "right"),
    "llama-lasttoken": Pipeline("llama", "lasttoken", "", "right"),
    "mistral-mean": Pipeline("mistral", "mean", "", "left"),
    "gemma3-mean-dense": Pipeline("gemma3", "mean", "gemma", "right"),
    # Left padding would move its absolute positions, in sentence-transformers too: right only.
    "gpt2-lasttoken": Pipeline("gpt2", "lasttoken", "", "right"),
}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    """A byte-level BPE that appends its EOS to every text and pair, as Qwen3-Embedding's (``harness.testmodels``)."""
    return build_decoder_tokenizer(tmp_path_factory.mktemp("decoder-tokenizer"), varied_sentences(120, seed=2) + HARD_TEXTS)


def build(directory: Path, tokenizer_dir: Path, architecture: str, model_class=AutoModel, **config) -> Path:
    """A random-weight ``architecture`` model of the SMALL shape with the test tokenizer, saved."""
    config_class, shape = ARCHITECTURES[architecture]
    vocab_size = len(AutoTokenizer.from_pretrained(str(tokenizer_dir)))
    return build_decoder(directory, tokenizer_dir, config_class(vocab_size=vocab_size, **SMALL, **shape, **config), model_class)


FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("major, saved_as", [(4, "PreTrainedTokenizerFast"), (5, "TokenizersBackend")])
def test_a_tokenizer_saved_by_transformers_4_or_5_is_imported_with_the_ids_it_gives(tokenizer_dir: Path, tmp_path: Path, major, saved_as):
    """The same byte-level BPE tokenizer as transformers 4 and 5 save it (``fixtures/make_tokenizer.py``;
    5.x names a tokenizer with no class of its own ``TokenizersBackend``, which 4.x does not have):
    imported, it keeps the ids the version that saved it gave, and loads in the library as it was."""
    written = FIXTURES / f"transformers_{major}_tokenizer"
    directory = build(tmp_path / "qwen3", tokenizer_dir, "qwen3")
    for stale in ("vocab.json", "merges.txt", "special_tokens_map.json", "added_tokens.json", "tokenizer_config.json"):
        (directory / stale).unlink(missing_ok=True)
    for path in written.glob("*.json"):
        if path.name != "expected.json":
            shutil.copy(path, directory / path.name)
    expected = json.loads((written / "expected.json").read_text())
    assert (expected["transformers"].split(".")[0], expected["class"]) == (str(major), saved_as)
    stored = bentoml.models.get(import_model(directory, name=f"transformers{major}-tokenizer", onnx=False))
    spec = ModelSpec.of(stored)
    encoded = TextTokenizer(stored.path, spec.max_length).encode(list(expected["ids"]))
    assert {text: e.ids.tolist() for text, e in zip(expected["ids"], encoded)} == expected["ids"]
    assert spec.pad_id == 0  # its EOS, the pad token of its config
    assert AutoTokenizer.from_pretrained(stored.path)("ok").input_ids == load_tokenizer(directory)("ok").input_ids == expected["ids"]["ok"]


def dense_modules(kind: str) -> list:
    torch.manual_seed(1)
    if kind == "gemma":
        return [
            models.Dense(32, 64, bias=False, activation_function=torch.nn.Identity()),
            models.Dense(64, 16, bias=False, activation_function=torch.nn.Identity()),
        ]
    return [models.Dense(32, 16, activation_function=torch.nn.Tanh())] if kind else []


class Embedder(NamedTuple):
    tag: str
    directory: Path  # the sentence-transformers pipeline as saved


@pytest.fixture(scope="module")
def embedder(tokenizer_dir, tmp_path_factory):
    """``embedder(name)``: the pipeline ``PIPELINES[name]`` saved by sentence-transformers and imported (once)."""
    imported: dict[str, Embedder] = {}

    def get(name: str) -> Embedder:
        if name not in imported:
            p = PIPELINES[name]
            root = tmp_path_factory.mktemp(name)
            transformer = models.Transformer(
                str(build(root / "base", tokenizer_dir, p.architecture)),
                max_seq_length=64,
                tokenizer_args={"padding_side": p.padding_side},
            )
            modules = [transformer, models.Pooling(32, pooling_mode=p.pooling), *dense_modules(p.dense), models.Normalize()]
            prompts = QWEN3_PROMPTS if p.default_prompt else None
            SentenceTransformer(modules=modules, prompts=prompts, default_prompt_name=p.default_prompt, device="cpu").save(str(root / "st"))
            imported[name] = Embedder(str(import_model(root / "st", name=name)), root / "st")
        return imported[name]

    return get


def prompted(embedder: Embedder, texts: list[str]) -> list[str]:
    """The texts as the service sends them to the Encoder: with the model's default prompt before each."""
    spec = ModelSpec.of(bentoml.models.get(embedder.tag))
    return [spec.prompts.get(spec.default_prompt_name, "") + text for text in texts]


@pytest.mark.parametrize("name", PIPELINES)
@pytest.mark.int8
def test_a_decoder_pipeline_is_served_as_the_library_encodes(embedder, name):
    model = embedder(name)
    library = SentenceTransformer(str(model.directory), device="cpu")  # as the library loads the files
    assert library.tokenizer.padding_side == PIPELINES[name].padding_side
    expected = library.encode(TEXTS, convert_to_numpy=True)  # with the default prompt, where there is one
    stored = bentoml.models.get(model.tag)
    assert stored.info.metadata["onnx"] is True
    spec = ModelSpec.of(stored)
    assert (spec.pooling, spec.normalize, spec.max_length, spec.dimensions) == (PIPELINES[name].pooling, True, 64, expected.shape[1])
    for backend in ("torch", "onnx"):
        served = backend_outputs(model.tag, backend, prompted(model, TEXTS))
        assert np.abs(served - expected).max() <= 1e-5, (backend, np.abs(served - expected).max())
    assert cosines(backend_outputs(model.tag, "onnx-int8", prompted(model, TEXTS)), expected).min() >= 0.99


def test_the_default_prompt_and_the_eos_are_read_from_the_files(embedder):
    model = embedder("qwen3-lasttoken")
    spec = ModelSpec.of(bentoml.models.get(model.tag))
    assert (spec.prompts, spec.default_prompt_name) == (QWEN3_PROMPTS, "query")
    ids = TextTokenizer(bentoml.models.get(model.tag).path, spec.max_length).encode(["ok"])[0].ids
    assert ids[-1] == AutoTokenizer.from_pretrained(str(model.directory)).eos_token_id  # the last token pooled is the EOS


@pytest.mark.parametrize("backend", ["torch", "onnx", pytest.param("onnx-int8", marks=pytest.mark.int8)])
@pytest.mark.parametrize("name", ["qwen3-lasttoken", "mistral-mean", "gemma3-mean-dense", "gpt2-lasttoken"])
def test_a_text_alone_equals_the_text_in_a_shuffled_batch(embedder, name, backend):
    """Right padding changes nothing a real token sees, for every backend; the batches mix lengths of 2-64 tokens."""
    stored = bentoml.models.get(embedder(name).tag)
    spec = ModelSpec.of(stored)
    ids = [encoded.ids for encoded in TextTokenizer(stored.path, spec.max_length).encode(TEXTS)]
    assert len({len(row) for row in ids}) >= 10
    model = load_backend(backend, stored.path, spec, 2)
    rng = random.Random(0)
    for probe in range(0, len(ids), 5):
        batch = [row for index, row in enumerate(ids) if index != probe]
        rng.shuffle(batch)
        position = rng.randrange(len(batch) + 1)
        batch.insert(position, ids[probe])
        alone = model.forward(*pad([ids[probe]], spec.pad_id))[0]
        together = model.forward(*pad(batch, spec.pad_id))[position]  # one pass, padded to the longest
        assert cosines(alone[None], together[None])[0] >= 0.99999, (TEXTS[probe], cosines(alone[None], together[None])[0])


def test_the_int8_graph_quantizes_every_weight_matmul_of_a_decoder(embedder):
    """The per-token rewrite of ``models.quantize`` reaches the decoder's projections: Q/K/V (one MatMul, as they read
    one input), O, gate/up (one) and down per layer."""
    directory = onnx_dir(bentoml.models.get(embedder("qwen3-lasttoken").tag).path)
    fp32, int8 = (onnx.load(str(directory / name)) for name in (FP32, INT8))

    def weight_matmuls(graph) -> int:
        weights = {init.name: numpy_helper.to_array(init).ndim for init in graph.initializer}
        return sum(node.op_type == "MatMul" and weights.get(node.input[1]) == 2 for node in graph.node)

    assert weight_matmuls(fp32.graph) == 7 * SMALL["num_hidden_layers"]
    assert weight_matmuls(int8.graph) == 0
    assert sum(node.op_type == "MatMulIntegerToFloat" for node in int8.graph.node) == 4 * SMALL["num_hidden_layers"]


def test_the_fp16_graph_of_a_decoder_stays_close_to_fp32(embedder):
    """The graph the CUDA path serves, run here on CPU: checks the conversion, not the CUDA provider."""
    import onnxruntime as ort

    from models.postprocess import sentence_embeddings

    stored = bentoml.models.get(embedder("qwen3-lasttoken").tag)
    spec = ModelSpec.of(stored)
    input_ids, attention_mask = pad([e.ids for e in TextTokenizer(stored.path, spec.max_length).encode(TEXTS)], spec.pad_id)
    pooled = []
    for name in (FP32, FP16):
        session = ort.InferenceSession(str(onnx_dir(stored.path) / name), providers=["CPUExecutionProvider"])
        hidden = session.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})[0]
        pooled.append(sentence_embeddings(hidden, attention_mask, spec.pooling, spec.normalize))
    assert cosines(*pooled).min() >= 0.999


@pytest.mark.int8
def test_graphs_too_large_for_one_protobuf_keep_their_weights_beside_them(tokenizer_dir, tmp_path, monkeypatch):
    """A Qwen3-0.6B's fp32 graph (2.4 GB) is past protobuf's 2 GiB: its weights go to a side file in the
    model's directory (ONNX external data). Forced here on a tiny Qwen3 for every graph: fp32 is still
    torch within 1e-5, and int8 loads from its side file with signed and with uint8 weights; each is held
    to the int8 gate where its kernels are exact (u8×s8 saturates on x86 without VNNI: ``models.cpu``)."""
    import onnxruntime as ort
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    from models import export
    from models.backends.onnx_backend import SIGNED, UNSIGNED, OnnxBackend
    from models.onnx_layout import external_data

    monkeypatch.setattr(export, "export_model", functools.partial(export.export_model, single_file_limit=0))
    tag = str(import_model(build(tmp_path / "qwen3", tokenizer_dir, "qwen3"), name="qwen3-external-data", task="embed"))
    stored = bentoml.models.get(tag)
    spec = ModelSpec.of(stored)
    directory = onnx_dir(stored.path)
    graphs = [directory / name for name in (FP32, INT8, FP16)]
    assert stored.info.metadata["onnx"] is True
    assert sorted(directory.iterdir()) == sorted([*graphs, *map(external_data, graphs)])  # no exporter leftovers
    for graph in graphs:
        initializers = onnx.load(str(graph), load_external_data=False).graph.initializer
        outside = {ExternalDataInfo(init).location for init in initializers if uses_external_data(init)}
        inside = max(numpy_helper.to_array(init).nbytes for init in initializers if not uses_external_data(init))
        assert (outside, inside < 1024) == ({external_data(graph).name}, True), (graph.name, outside, inside)  # onnx keeps scalars inline

    expected = backend_outputs(tag, "torch", TEXTS)
    assert np.abs(backend_outputs(tag, "onnx", TEXTS) - expected).max() <= 1e-5
    input_ids, attention_mask = pad([e.ids for e in TextTokenizer(stored.path, spec.max_length).encode(TEXTS)], spec.pad_id)
    fp16 = ort.InferenceSession(str(directory / FP16), providers=["CPUExecutionProvider"])
    assert fp16.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})[0].shape[:2] == input_ids.shape
    sessions_from = []
    session = ort.InferenceSession
    monkeypatch.setattr(
        ort, "InferenceSession", lambda source, *args, **kwargs: sessions_from.append(source) or session(source, *args, **kwargs)
    )
    for unsigned, precision in ((False, SIGNED), (True, UNSIGNED)):
        int8 = OnnxBackend(stored.path, spec, 2, cpu_graph="int8", cuda=False, unsigned=unsigned)
        assert int8.precision == precision
        rows = int8.forward(input_ids, attention_mask)
        assert rows.shape == expected.shape and np.isfinite(rows).all(), precision
        if unsigned or cpu.signed_int8_is_exact():
            assert cosines(rows, expected).min() >= 0.99, precision
    # The uint8 graph is read from a file, as one past 2 GiB must be: serialized into memory it would fail.
    assert [isinstance(source, str) and Path(source).name for source in sessions_from] == [INT8] * 4  # 2 sessions each (Streams)


def reranker_dir(directory: Path, tokenizer_dir: Path, **config) -> Path:
    """A one-logit ``Qwen3ForSequenceClassification``, its head drawn wide enough that pairs score apart."""
    build(directory, tokenizer_dir, "qwen3", AutoModelForSequenceClassification, num_labels=1, **config)
    model = AutoModelForSequenceClassification.from_pretrained(str(directory)).eval()
    with torch.no_grad():
        model.score.weight.normal_(0, 1)
    model.save_pretrained(directory)
    return directory


@torch.inference_mode()
def transformers_logits(directory: Path, pad_token_id: int, padding_side: str, max_length: int) -> np.ndarray:
    """transformers' own logits for PAIRS in one padded batch, told the pad token it finds each row's end by."""
    tokenizer = AutoTokenizer.from_pretrained(str(directory), padding_side=padding_side)
    model = AutoModelForSequenceClassification.from_pretrained(str(directory), pad_token_id=pad_token_id).eval()
    first, second = zip(*PAIRS)
    batch = tokenizer(list(first), list(second), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    assert "token_type_ids" not in batch
    return model(**batch).logits.numpy()


@torch.inference_mode()
def logits_alone(directory: Path, max_length: int) -> np.ndarray:
    """transformers' logits for each pair alone (no padding: no pad token needed to find the end)."""
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    model = AutoModelForSequenceClassification.from_pretrained(str(directory)).eval()
    return np.concatenate(
        [model(**tokenizer(a, b, truncation=True, max_length=max_length, return_tensors="pt")).logits.numpy() for a, b in PAIRS]
    )


@pytest.fixture(scope="module")
def reranker(tokenizer_dir, tmp_path_factory) -> tuple[str, Path]:
    """(tag, source directory) of a one-logit Qwen3 reranker whose config has no pad token, imported."""
    directory = reranker_dir(tmp_path_factory.mktemp("reranker"), tokenizer_dir)
    return str(import_model(directory, name="qwen3-reranker")), directory


def test_a_decoder_reranker_is_scored_as_transformers_scores_it(reranker):
    """No pad token in the config (Qwen3ForSequenceClassification then refuses batches): the import sets the
    tokenizer's, which is also the EOS it appends, so the score is read at the token before it, as transformers
    reads it once told; either padding side of transformers' batch gives the same logits."""
    tag, directory = reranker
    assert AutoModelForSequenceClassification.from_pretrained(str(directory)).config.pad_token_id is None
    stored = bentoml.models.get(tag)
    spec = ModelSpec.of(stored)
    pad_id = AutoTokenizer.from_pretrained(str(directory)).pad_token_id
    assert (spec.task, spec.labels, spec.activation, spec.token_types, spec.pad_id) == ("classify", ("LABEL_0",), "sigmoid", False, pad_id)
    assert spec.max_length == SMALL["max_position_embeddings"]  # the tokenizer sets no limit: the position table does
    assert AutoModelForSequenceClassification.from_pretrained(stored.path).config.pad_token_id == pad_id
    expected = transformers_logits(directory, pad_id, "right", spec.max_length)
    assert np.abs(transformers_logits(directory, pad_id, "left", spec.max_length) - expected).max() <= 1e-5
    assert expected.std() > 0.1  # pairs score apart: a wrong token would show
    for backend in ("torch", "onnx"):
        served = backend_outputs(tag, backend, PAIRS)
        assert np.abs(served - expected).max() <= 1e-5, (backend, np.abs(served - expected).max())


def test_a_reranker_pads_with_the_pad_token_of_its_config(tokenizer_dir, tmp_path):
    """A config whose pad token is not the tokenizer's: rows are padded with the config's, or the model would
    read its score at the padding. Held to each pair alone (nothing padded: no pad token needed)."""
    im_end = AutoTokenizer.from_pretrained(str(tokenizer_dir)).convert_tokens_to_ids("<|im_end|>")
    directory = reranker_dir(tmp_path / "reranker", tokenizer_dir, pad_token_id=im_end)
    tag = str(import_model(directory, name="qwen3-reranker-own-pad"))
    spec = ModelSpec.of(bentoml.models.get(tag))
    assert spec.pad_id == im_end
    expected = logits_alone(directory, spec.max_length)
    for backend in ("torch", "onnx"):
        assert np.abs(backend_outputs(tag, backend, PAIRS) - expected).max() <= 1e-5, backend


def test_pairs_reach_a_decoder_as_its_tokenizer_builds_them(tokenizer_dir):
    """No token types: the pair's second text travels with its segment folded in and arrives as bare ids."""
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    encoded = TextTokenizer(tokenizer_dir, 256).encode(PAIRS)
    input_ids, attention_mask = pad([e.ids for e in encoded], 0)
    ids, _ = split_segments(input_ids)
    for row, mask, (first, second) in zip(ids, attention_mask, PAIRS):
        assert row[mask == 1].tolist() == tokenizer(first, second, truncation=True, max_length=256)["input_ids"]


def test_an_encoder_decoder_is_still_refused(tokenizer_dir, tmp_path):
    directory = tmp_path / "t5"
    config = T5Config(vocab_size=400, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=2)
    T5ForConditionalGeneration(config).save_pretrained(directory)
    AutoTokenizer.from_pretrained(str(tokenizer_dir)).save_pretrained(directory)
    before = len(bentoml.models.list())
    refusal = r"^unsupported architecture T5ForConditionalGeneration \(model_type 't5'\): an encoder-decoder model"
    with pytest.raises(UnsupportedModel, match=refusal) as refused:
        import_model(directory, name="t5")
    assert "\n" not in str(refused.value)
    assert len(bentoml.models.list()) == before


def test_max_length_is_settable_at_import_within_the_models_limit(tokenizer_dir, tmp_path):
    directory = build(tmp_path / "qwen3", tokenizer_dir, "qwen3")
    assert ModelSpec.of(bentoml.models.get(import_model(directory, name="qwen3-plain", onnx=False))).max_length == 256
    assert ModelSpec.of(bentoml.models.get(import_model(directory, name="qwen3-48", onnx=False, max_length=48))).max_length == 48
    with pytest.raises(UnsupportedModel, match="--max-length 1000 is past the model's limit of 256 tokens"):
        import_model(directory, name="qwen3-too-long", onnx=False, max_length=1000)


def test_a_mixture_of_experts_is_stored_for_torch_and_says_so(tokenizer_dir, tmp_path, caplog, monkeypatch):
    """transformers 5's MoE block counts the tokens per expert with ``torch.histc``, which the ONNX
    exporter cannot write (4.x looped over the experts its input reaches, which a trace cannot follow
    either). Caught at import; torch serves it."""
    monkeypatch.setattr(logging.getLogger("textbento.import"), "propagate", True)  # an import CLI run before turns it off
    base = build(tmp_path / "base", tokenizer_dir, "qwen3-moe")
    pipeline = [models.Transformer(str(base), max_seq_length=64), models.Pooling(32, pooling_mode="mean"), models.Normalize()]
    SentenceTransformer(modules=pipeline, device="cpu").save(str(tmp_path / "st"))
    with caplog.at_level(logging.WARNING, logger="textbento.import"):
        tag = str(import_model(tmp_path / "st", name="qwen3-moe"))
    (warning,) = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warning == (
        "ONNX export of Qwen3MoeModel failed (UnsupportedOperatorError: Exporting the operator 'aten::histc' to ONNX "
        "opset version 17 is not supported): stored without ONNX graphs, the torch backend serves it"
    )
    stored = bentoml.models.get(tag)
    assert not has_onnx(stored.path) and stored.info.metadata["onnx"] is False
    assert load_backend("auto", stored.path, ModelSpec.of(stored), 2).name == "torch"
    expected = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert np.abs(backend_outputs(tag, "torch", TEXTS) - expected).max() <= 1e-5


def test_a_decoder_embedder_served_for_real(embedder, logs):
    model = embedder("qwen3-lasttoken")
    texts = TEXTS[:8]
    with running(model.tag, logs, "decoder", TEXTBENTO_WORKERS="1") as server:
        (card,) = requests.get(f"{server.url}/v1/models", timeout=30).json()["data"]
        response = requests.post(f"{server.url}/v1/embeddings", json={"input": texts}, timeout=60)
        document = requests.post(f"{server.url}/v1/embeddings", json={"input": texts, "prompt_name": "document"}, timeout=60)
    assert (card["id"], card["task"], card["pooling"], card["max_length"]) == ("qwen3-lasttoken", "embed", "lasttoken", 64)
    assert (card["prompts"], card["default_prompt_name"]) == (QWEN3_PROMPTS, "query")
    assert response.status_code == document.status_code == 200, (response.text, document.text)
    vectors = np.array([item["embedding"] for item in response.json()["data"]])
    assert_served_as_in_process(vectors, card, prompted(model, texts))
    unprompted = np.array([item["embedding"] for item in document.json()["data"]])
    assert_served_as_in_process(unprompted, card, texts)


def test_a_decoder_reranker_served_for_real(reranker, logs):
    """/v1/rerank and /v1/classify pairs on the fp32 graph: transformers' sigmoid scores and logits."""
    tag, directory = reranker
    pad_id = AutoTokenizer.from_pretrained(str(directory)).pad_token_id
    expected = transformers_logits(directory, pad_id, "right", SMALL["max_position_embeddings"])[:, 0]
    query, documents = PAIRS[0][0], [document for _, document in PAIRS]
    with running(tag, logs, "decoder-reranker", TEXTBENTO_WORKERS="1", TEXTBENTO_BACKEND="onnx") as server:
        ranked = requests.post(f"{server.url}/v1/rerank", json={"query": query, "documents": documents[:2]}, timeout=60)
        pairs = {"inputs": [list(pair) for pair in PAIRS], "raw_scores": True}
        classified = requests.post(f"{server.url}/v1/classify", json=pairs, timeout=60)
    assert ranked.status_code == classified.status_code == 200, (ranked.text, classified.text)
    relevance = {item["index"]: item["relevance_score"] for item in ranked.json()["results"]}
    assert np.allclose([relevance[0], relevance[1]], 1 / (1 + np.exp(-expected[:2])), atol=1e-5), (relevance, expected[:2])
    assert np.abs(np.array([item["score"] for item in classified.json()["data"]]) - expected).max() <= 1e-5
