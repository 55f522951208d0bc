"""ONNX Runtime backends: the export into the store, and the accuracy gates against PyTorch.

Every comparison goes through ``run_batch`` (length-sorted, padded sub-batches), so outputs are
compared per text: pooled embeddings and logits only ever see real tokens, never padding.
"""

from __future__ import annotations

import contextlib
import functools
import io
import random
import shutil
import subprocess
import sys
from pathlib import Path

import bentoml
import numpy as np
import pytest
import torch

from harness.per_tensor import quantize_int8_per_tensor
from models.backends import load_backend
from models.batching import pad
from models.inference import run_batch, run_window
from models.onnx_layout import FP16, FP32, INT8, onnx_dir
from models.postprocess import sentence_embeddings
from models.spec import ModelSpec
from models.store import default_model_dir, import_model
from models.tokenization import TextTokenizer
from serving.settings import Settings
from tests.conftest import assert_chosen_by_auto
from tests.reference import backend_outputs
from tests.reference import sentence_embeddings as sentence_embeddings_of
from train_import.export_onnx import main as export_main

ROOT = Path(__file__).resolve().parent.parent

TOPICS = {
    "cooking": "garlic onions simmer oven bake flour butter recipe spicy soup roast basil pasta kitchen chef saffron",
    "football": "striker goal penalty referee league midfield offside stadium coach transfer keeper tackle derby fans",
    "finance": "stocks bonds inflation interest dividend portfolio hedge market bank loan mortgage earnings recession",
    "weather": "rain thunderstorm forecast humidity breeze snow drought heatwave clouds hurricane frost sunshine fog",
    "software": "compiler python bug deploy server database kernel thread latency cache container api refactor",
    "music": "guitar melody chorus drums orchestra violin jazz album concert lyrics tempo symphony rhythm piano",
    "medicine": "vaccine symptoms doctor surgery fever antibiotics diagnosis nurse clinic therapy dosage allergy",
    "travel": "airport passport luggage hotel beach itinerary train museum visa ferry backpack hostel sightseeing",
    "politics": "election parliament senator ballot campaign policy minister vote coalition debate referendum tax",
    "animals": "elephant kitten wolf parrot dolphin squirrel owl tiger puppy salmon beetle giraffe horse",
    "astronomy": "galaxy telescope comet orbit nebula planet asteroid eclipse gravity supernova moon rocket",
    "gardening": "tomatoes compost seeds pruning roses soil weeds greenhouse tulips watering shovel orchard",
}
FRAMES = [
    "{}.",
    "Why does {} matter?",
    "I love {}!",
    "Nobody expected {} today",
    "Breaking: {}",
    "{} — thoughts?",
    "Notes on {}: 1) {} 2) {}",
    "My review: {}, but honestly {}.",
    "¿{}? Déjà vu, {} 🙂",
]
LENGTHS = [1, 2, 3, 5, 8, 12, 20, 35, 60]  # words; the longest are ~80 tokens


def varied_sentences(count: int = 240, seed: int = 0) -> list[str]:
    """Deterministic texts of 1-60+ words over 12 topics, in pairs: a text, then a light edit of it.

    The pairs give every text a clear nearest neighbour; without them, near-identical bags of
    topic words tie, and nearest-neighbour agreement measures the ties rather than the model.
    """
    rng = random.Random(seed)
    pools = [words.split() for words in TOPICS.values()]
    texts = []
    for index in range(count // 2):
        words = pools[index % len(pools)]
        frame = rng.choice(FRAMES)
        holes = frame.count("{}")
        length = max(1, rng.choice(LENGTHS) // holes)
        text = frame.format(*(" ".join(rng.choice(words) for _ in range(length)) for _ in range(holes)))
        if index % 9 == 0:
            text += f" ({rng.randint(1, 2025)})"
        texts += [text, edited(text, words, rng)]
    return texts


def edited(text: str, words: list[str], rng: random.Random) -> str:
    """A word dropped, replaced or added, or the case and punctuation changed."""
    tokens = text.split()
    kind = rng.randrange(4)
    if kind == 0 and len(tokens) > 1:
        del tokens[rng.randrange(len(tokens))]
    elif kind == 1:
        tokens[rng.randrange(len(tokens))] = rng.choice(words)
    elif kind == 2:
        tokens.insert(rng.randrange(len(tokens) + 1), rng.choice(["really", "also", "maybe", "again", "still"]))
    else:
        return text.lower().rstrip(".!?") + "!"
    return " ".join(tokens)


# The hard cases of int8: 1-3 tokens (one token row's scale is the whole text), past max_length,
# code, digits, accents and symbols.
HARD_TEXTS = [
    "ok",
    "a",
    "Hi!",
    "no",
    "42",
    "?",
    "ü",
    "🙂",
    "yes please",
    "x",
    "x = f(y) + 3;",
    "def area(r):\n    return 3.14159 * r ** 2",
    "SELECT id, name FROM users WHERE age > 30;",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "1234567890",
    "3.14159 2.71828 1.41421",
    "2026-11-30 23:59:59 UTC",
    "+1 (555) 010-4477 ext. 12",
    "Ça coûte 12,50 € — déjà vu",
    "naïve café résumé façade",
    "Ærøskøbing, Smørrebrød",
    "Straße über Fuß",
    "¿Dónde está la biblioteca?",
    "«Ceci n'est pas une pipe»",
    "word " * 400,
    "Une très longue phrase en français, avec des accents: é è ê à ù ç. " * 40,
    "The quick brown fox jumps over the lazy dog. " * 60,
]
TEXTS = varied_sentences() + HARD_TEXTS


def export_onnx(tag: str) -> str:
    """The export CLI's ``main``, in process (a subprocess would import torch again); the new tag."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert export_main([tag]) == 0
    return printed.getvalue().strip()


@pytest.fixture(scope="session")
def plain_embed_tag() -> str:
    """all-MiniLM-L6-v2 stored without ONNX graphs (``import_model --no-onnx``)."""
    return str(import_model(default_model_dir(), name="minilm-plain", onnx=False))


@pytest.fixture(scope="session")
def embed_onnx_tag(plain_embed_tag: str) -> str:
    return export_onnx(plain_embed_tag)


@pytest.fixture(scope="session")
def topic_classifier_tag(tmp_path_factory) -> str:
    """A classifier whose labels depend on the text: all-MiniLM-L6-v2 with a nearest-centroid head.

    The conftest classifier has random weights: its logits are ~0.004 and it labels every text
    NEGATIVE, so label agreement on it cannot fail. This one has 12 labels, one per topic, the
    head being each topic's mean pooler output (from texts other than the ones tested).
    """
    from transformers import AutoTokenizer, BertForSequenceClassification

    directory = tmp_path_factory.mktemp("topic-classifier")
    labels = dict(enumerate(TOPICS))
    tokenizer = AutoTokenizer.from_pretrained(str(default_model_dir()))
    model = BertForSequenceClassification.from_pretrained(
        str(default_model_dir()), id2label=labels, label2id={v: k for k, v in labels.items()}
    ).eval()
    training = varied_sentences(480, seed=1)
    topic = torch.tensor([(index // 2) % len(TOPICS) for index in range(len(training))])  # texts come in pairs
    with torch.inference_mode():
        batch = tokenizer(training, padding=True, truncation=True, max_length=256, return_tensors="pt")
        pooled = model.bert(**batch).pooler_output
        centroids = torch.stack([pooled[topic == label].mean(0) for label in labels])
        model.classifier.weight.copy_(centroids - centroids.mean(0))
        model.classifier.bias.zero_()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(import_model(directory, name="topics"))


def load(tag: str, backend: str):
    """(backend, spec, token ids of TEXTS) for a stored model, loaded on this thread with 2 threads."""
    stored = bentoml.models.get(tag)
    spec = ModelSpec.of(stored)
    ids = [encoded.ids for encoded in TextTokenizer(stored.path, spec.max_length).encode(TEXTS)]
    return load_backend(backend, stored.path, spec, 2), spec, ids


@functools.cache
def outputs(tag: str, backend: str) -> np.ndarray:
    """One row per text of TEXTS: embeddings or logits (length-sorted, padded sub-batches)."""
    return backend_outputs(tag, backend, TEXTS)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def nearest_neighbours(vectors: np.ndarray) -> np.ndarray:
    similarity = vectors @ vectors.T
    np.fill_diagonal(similarity, -np.inf)
    return similarity.argmax(1)


def test_the_sentence_set_is_varied(embed_tag: str):
    words = [len(text.split()) for text in TEXTS]
    assert len(set(TEXTS)) >= 260 and min(words) == 1 and max(words) >= 400
    assert len({word.lower().strip(".,!?():;") for text in TEXTS for word in text.split()}) >= 150
    stored = bentoml.models.get(embed_tag)
    lengths = [len(e.ids) for e in TextTokenizer(stored.path, ModelSpec.of(stored).max_length).encode(TEXTS)]
    assert min(lengths) == 3 and sum(length <= 5 for length in lengths) >= 10  # [CLS] ok [SEP]
    assert sum(e.truncated for e in TextTokenizer(stored.path, 256).encode(TEXTS)) >= 3


def test_export_saves_a_new_version_with_the_graphs(plain_embed_tag: str, embed_onnx_tag: str):
    source, exported = bentoml.models.get(plain_embed_tag), bentoml.models.get(embed_onnx_tag)
    assert exported.tag.name == source.tag.name and exported.tag != source.tag
    assert all((onnx_dir(exported.path) / name).is_file() for name in (FP32, INT8, FP16))
    assert not onnx_dir(source.path).exists()  # the stored source model is never changed
    assert exported.info.metadata["derived_from"] == plain_embed_tag and exported.info.metadata["onnx"] is True
    assert ModelSpec.of(exported) == ModelSpec.of(source)


def test_import_saves_the_graphs_by_default(embed_tag: str, topic_classifier_tag: str):
    for tag in (embed_tag, topic_classifier_tag):  # the CLI's default, and import_model's
        assert all((onnx_dir(bentoml.models.get(tag).path) / name).is_file() for name in (FP32, INT8, FP16))
    assert ModelSpec.of(bentoml.models.get(topic_classifier_tag)).labels == tuple(TOPICS)


def test_onnx_runtime_writes_nothing_home_and_sends_no_telemetry(tmp_path: Path):
    """ONNX Runtime alone writes a device id under $HOME (and would send usage events); imported by textbento, it does not."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", "import models.backends.onnx_backend"], cwd=ROOT, env=env, check=True)
    assert list(home.iterdir()) == []


def test_settings_accept_the_onnx_backends():
    assert Settings().backend == "auto"
    assert Settings(backend="onnx").backend == "onnx" and Settings(backend="onnx-int8").backend == "onnx-int8"
    with pytest.raises(ValueError):
        Settings(backend="tensorrt")


def test_backend_names_a_missing_export(plain_embed_tag: str):
    with pytest.raises(FileNotFoundError, match="export_onnx"):
        load(plain_embed_tag, "onnx")


def test_auto_serves_the_fastest_faithful_graph_and_torch_without_graphs(embed_tag: str, plain_embed_tag: str):
    backend = load(embed_tag, "auto")[0]
    trials = [trial.as_dict() for trial in backend.trials]
    assert_chosen_by_auto({"backend": backend.name, "precision": backend.precision, "device": backend.device, "trials": trials})
    assert load(plain_embed_tag, "auto")[0].name == "torch"


def test_onnx_embeddings_match_torch(embed_onnx_tag: str):
    assert cosines(outputs(embed_onnx_tag, "onnx"), outputs(embed_onnx_tag, "torch")).min() >= 0.9999


def test_onnx_logits_match_torch(classify_tag: str, topic_classifier_tag: str):
    for tag in (classify_tag, topic_classifier_tag):
        assert np.abs(outputs(tag, "onnx") - outputs(tag, "torch")).max() <= 1e-3


@pytest.mark.int8
def test_default_embeddings_match_transformers(embed_tag: str):
    """The accuracy gate of the default backend (onnx-int8 on a CPU) against transformers fp32."""
    served = outputs(embed_tag, "auto")
    expected = sentence_embeddings_of(default_model_dir(), TEXTS, max_length=ModelSpec.of(bentoml.models.get(embed_tag)).max_length)
    cosine = cosines(served, expected)
    assert cosine.min() >= 0.99 and cosine.mean() >= 0.998, (cosine.min(), cosine.mean(), TEXTS[int(cosine.argmin())])
    agreement = np.mean(nearest_neighbours(served) == nearest_neighbours(expected))
    assert agreement >= 0.99, agreement


def test_per_tensor_int8_would_miss_the_gate(embed_tag: str, tmp_path: Path):
    """The gate can fail: ONNX Runtime's per-tensor dynamic int8, on the texts alone, misses it (min 0.974)."""
    stored = bentoml.models.get(embed_tag)
    spec = ModelSpec.of(stored)
    directory = tmp_path / "per-tensor"
    shutil.copytree(stored.path, directory, dirs_exist_ok=True)
    graph = onnx_dir(directory) / INT8
    quantize_int8_per_tensor(onnx_dir(directory) / FP32, graph)
    backend = load_backend("onnx-int8", directory, spec, 2)
    ids = [e.ids for e in TextTokenizer(stored.path, spec.max_length).encode(TEXTS)]
    alone = np.stack([run_batch(backend, [one], spec.pad_id, 8192)[0] for one in ids])
    cosine = cosines(alone, outputs(embed_tag, "onnx"))
    assert cosine.min() < 0.99, cosine.min()


def test_seven_bit_weights_stay_where_u8s8_kernels_cannot_saturate(embed_tag: str):
    """``weight_levels`` bounds the weights of the roles given (the 7-bit recipe of ``bench.int8_recipes``), and only those."""
    import onnx
    from onnx import numpy_helper

    from models.quantize import INT8_LEVELS, SEVEN_BIT_LEVELS, PerTokenInt8

    assert 255 * SEVEN_BIT_LEVELS * 2 <= 32767  # vpmaddubsw's pair of products, in int16

    def largest_weights(**levels: int) -> list[int]:
        model = PerTokenInt8(onnx.load(str(onnx_dir(bentoml.models.get(embed_tag).path) / FP32)), weight_levels=levels).rewrite()
        weights = {init.name: init for init in model.graph.initializer}
        kernels = [node for node in model.graph.node if node.op_type == "MatMulIntegerToFloat"]
        return sorted({int(np.abs(numpy_helper.to_array(weights[node.input[1]]).astype(int)).max()) for node in kernels})

    assert largest_weights() == [INT8_LEVELS]
    assert largest_weights(qkv=SEVEN_BIT_LEVELS, after_gelu=SEVEN_BIT_LEVELS, other=SEVEN_BIT_LEVELS) == [SEVEN_BIT_LEVELS]
    assert largest_weights(qkv=SEVEN_BIT_LEVELS) == [SEVEN_BIT_LEVELS, INT8_LEVELS]


@pytest.mark.int8
def test_the_int8_rewrite_computes_per_token_arithmetic():
    """Three MatMuls on one input (as Q, K and V: two with a bias, one whose Add is a residual) and one alone on
    another, rewritten and run: each output equals numpy's per-row asymmetric quantization, integer product and
    scales (plus the bias). The three run as one MatMul, split after; the biases ride in the zero points' Gemm
    while the residual Add stays."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from models import cpu
    from models.quantize import PerTokenInt8, unsigned_weights, weight_int8

    rng = np.random.default_rng(7)
    k, n = 48, 40
    w_bias, w_narrow, w_residual, w_alone = (rng.normal(0, 0.2, (k, width)).astype(np.float32) for width in (n, 16, n, n))
    bias, narrow_bias = rng.normal(0, 1, n).astype(np.float32), rng.normal(0, 1, 16).astype(np.float32)
    x, y = (rng.normal(0, 1, (2, 5, k)).astype(np.float32) for _ in range(2))
    x[0, 1] = np.abs(x[0, 1])  # a one-sided row, as after GELU
    x[1, 3] = 0.0  # an empty (padding-like) row
    residual = rng.normal(0, 1, (2, 5, n)).astype(np.float32)
    named = [(w_bias, "w1"), (w_narrow, "w2"), (w_residual, "w3"), (w_alone, "w4"), (bias, "b1"), (narrow_bias, "b2")]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["biased"]),
        helper.make_node("MatMul", ["x", "w2"], ["m2"]),
        helper.make_node("Add", ["b2", "m2"], ["narrow"]),
        helper.make_node("MatMul", ["x", "w3"], ["m3"]),
        helper.make_node("Add", ["m3", "residual"], ["with_residual"]),
        helper.make_node("MatMul", ["y", "w4"], ["alone"]),
    ]
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("biased", "narrow", "with_residual", "alone")]
    sizes = {"x": k, "y": k, "residual": n}
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [None, None, size]) for name, size in sizes.items()]
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(a, name) for a, name in named])
    model = PerTokenInt8(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)).rewrite()
    ops = [node.op_type for node in model.graph.node]
    assert (ops.count("MatMulIntegerToFloat"), ops.count("Split"), ops.count("Add")) == (2, 1, 1)
    assert not {"b1", "b2"} & {init.name for init in model.graph.initializer}  # folded, not left unused
    if not cpu.signed_int8_is_exact():
        model = unsigned_weights(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x, "y": y, "residual": residual})

    def expected(a: np.ndarray, weight: np.ndarray) -> np.ndarray:
        rows = a.reshape(-1, k)
        low, high = np.minimum(rows.min(axis=1), 0), np.maximum(rows.max(axis=1), 0)
        scale = np.maximum((high - low) * np.float32(1 / 255), np.float32(1e-12)).astype(np.float32)
        zero = np.clip(np.round(-low / scale), 0, 255)
        quantized = np.clip(np.round(rows / scale[:, None]) + zero[:, None], 0, 255)
        w_q, w_scale = weight_int8(weight)
        integer = (quantized - zero[:, None]).astype(np.int64) @ w_q.astype(np.int64)
        return (integer * w_scale.astype(np.float64) * scale[:, None].astype(np.float64)).reshape(2, 5, -1)

    wanted = [expected(x, w_bias) + bias, expected(x, w_narrow) + narrow_bias, expected(x, w_residual) + residual, expected(y, w_alone)]
    for one, want in zip(got, wanted):
        np.testing.assert_allclose(one, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[0], x @ w_bias + bias, atol=0.1)  # and near the fp32 product it stands for


def test_uint8_weights_only_where_int8_ones_could_saturate(embed_tag: str):
    """Where u8×s8 kernels saturate, the 8-bit weights move to u8×u8 kernels; 7-bit ones stay on u8×s8."""
    import onnx
    from onnx import TensorProto

    from models.quantize import SEVEN_BIT_LEVELS, PerTokenInt8, unsigned_weights

    fp32 = onnx.load(str(onnx_dir(bentoml.models.get(embed_tag).path) / FP32))
    model = unsigned_weights(PerTokenInt8(fp32, weight_levels={"qkv": SEVEN_BIT_LEVELS}).rewrite())
    weights = {init.name: init.data_type for init in model.graph.initializer}
    kinds = [(weights[node.input[1]], "q_128_weights" in node.input) for node in model.graph.node if node.op_type == "MatMulIntegerToFloat"]
    assert kinds.count((TensorProto.INT8, False)) == 6  # Q, K and V (one MatMul) of 6 layers
    assert kinds.count((TensorProto.UINT8, True)) == 3 * 6  # attention's output, the FFN's two
    assert len(kinds) == 4 * 6


def test_default_labels_agree_with_torch(topic_classifier_tag: str):
    """Labels of the default backend vs transformers, on every text whose label torch decides.

    A text without a topic ("ok", "🙂", a timestamp) has logits tied within 1-8% of their range:
    int8 breaks 5 of those 27 ties differently (measured), fp32 ONNX none. Ties are left out as
    the nearest-neighbour gate leaves them out: what is compared is the model, not the tie-break.
    """
    served, expected = outputs(topic_classifier_tag, "auto"), outputs(topic_classifier_tag, "torch")
    top_two = np.sort(expected, axis=1)[:, ::-1]
    decided = top_two[:, 0] - top_two[:, 1] >= 0.1 * (top_two[:, 0] - top_two[:, -1])
    assert decided.mean() >= 0.9, decided.mean()
    agreement = np.mean(served[decided].argmax(1) == expected[decided].argmax(1))
    assert agreement >= 0.99, agreement


def test_topic_classifier_labels_depend_on_the_text(topic_classifier_tag: str):
    assert len(set(outputs(topic_classifier_tag, "torch").argmax(1))) == len(TOPICS)


def test_fp16_graph_stays_close_to_fp32(embed_onnx_tag: str):
    """The graph the CUDA path serves, run here on CPU: checks the conversion, not the CUDA provider."""
    import onnxruntime as ort

    stored = bentoml.models.get(embed_onnx_tag)
    spec = ModelSpec.of(stored)
    ids = [encoded.ids for encoded in TextTokenizer(stored.path, spec.max_length).encode(TEXTS[:32])]
    input_ids, attention_mask = pad(ids, spec.pad_id)
    feed = {"input_ids": input_ids, "attention_mask": attention_mask}
    pooled = {}
    for name in (FP32, FP16):
        session = ort.InferenceSession(str(onnx_dir(stored.path) / name), providers=["CPUExecutionProvider"])
        pooled[name] = sentence_embeddings(session.run(None, feed)[0], attention_mask, spec.pooling, spec.normalize)
    assert cosines(pooled[FP16], pooled[FP32]).min() >= 0.999


def test_openvino_meets_the_gates_and_batch_invariance(embed_tag: str):
    """OpenVINO on the stored fp32 graph (bf16 where the CPU has bf16 units, ``auto``'s candidate there):
    within the gates of fp32 ONNX Runtime, and a text's vector moves with its batch mates by less than
    the invariance gate, 0.99999 (bf16 rounds sums of a batch's rows in another order)."""
    served = outputs(embed_tag, "openvino")
    cosine = cosines(served, outputs(embed_tag, "onnx"))
    assert cosine.min() >= 0.99 and cosine.mean() >= 0.998, (cosine.min(), cosine.mean())
    model, spec, ids = load(embed_tag, "openvino")
    alone = np.stack([run_batch(model, [one], spec.pad_id, 8192)[0] for one in ids[::40]])
    assert cosines(alone, served[::40]).min() >= 0.99999


def test_a_window_in_whole_passes_per_stream_equals_the_encoders_passes(embed_tag: str):
    """``run_window`` (bulk jobs: whole passes, one per stream at once) answers what ``run_batch`` does
    (every pass cut across the streams), row for row, in the input's order, with many passes in flight."""
    model, spec, ids = load(embed_tag, "onnx-int8")
    assert model.passes_at_once == 2
    window, batch = np.stack(run_window(model, ids, spec.pad_id, 256)), np.stack(run_batch(model, ids, spec.pad_id, 256))
    assert cosines(window, batch).min() >= 0.99999


@pytest.mark.slow  # its models come through getfixturevalue, which the slow-fixture marking cannot see
@pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
@pytest.mark.parametrize("tag_fixture", ["embed_onnx_tag", "topic_classifier_tag"])
def test_a_text_alone_equals_the_text_in_a_mixed_batch(backend: str, tag_fixture: str, request):
    model, spec, ids = load(request.getfixturevalue(tag_fixture), backend)
    rng = random.Random(0)
    for probe in range(0, len(ids), 40):  # 6 probes, each inside its own batch of 32
        others = rng.sample([i for i in range(len(ids)) if i != probe], 31)
        position = rng.randrange(32)
        batch = [ids[i] for i in others[:position]] + [ids[probe]] + [ids[i] for i in others[position:]]
        alone = run_batch(model, [ids[probe]], spec.pad_id, 8192)[0]
        together = run_batch(model, batch, spec.pad_id, 8192)[position]
        if spec.task == "embed":
            assert cosines(alone[None], together[None])[0] >= 0.99999
        else:
            assert np.abs(alone - together).max() <= 1e-4
