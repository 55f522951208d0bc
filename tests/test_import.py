"""The import CLI: task detection, recorded metadata, and every bad input → one stderr line, exit 1, store untouched."""

import json
import shutil
from types import SimpleNamespace

import bentoml
import pytest
from transformers import BartConfig, BertConfig, DistilBertConfig, GPT2Config, LlamaConfig, Qwen3Config, T5Config

from harness.testmodels import build_decoder, build_decoder_tokenizer
from models.detection import UnsupportedModel, read_sentence_transformers
from models.spec import PASS_MEMORY, REFERENCE_BUDGET, ModelSpec, memory_cap, pass_bytes, shape_of
from models.store import default_model_dir, import_model
from models.tasks import detect_task
from models.tokenization import TextTokenizer
from serving.settings import Settings
from tests.conftest import run_import
from train_import.import_model import main

# A decoder whose position table is Qwen3's 32,768, tiny otherwise but for its 16 heads: what one pass costs grows with them.
LONG_DECODER = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 8}
LONG_DECODER_CAP = 2816


def test_detects_classifier_and_encoder_tasks(tmp_path):
    assert detect_task(tmp_path, DistilBertConfig(architectures=["DistilBertForSequenceClassification"])).name == "classify"
    assert detect_task(tmp_path, BertConfig(architectures=["BertModel"])).name == "embed"
    assert detect_task(tmp_path, DistilBertConfig(architectures=["DistilBertForSequenceClassification"]), "embed").name == "embed"


def test_detects_decoder_only_tasks(tmp_path):
    assert detect_task(tmp_path, Qwen3Config(architectures=["Qwen3Model"])).name == "embed"
    assert detect_task(tmp_path, GPT2Config(architectures=["GPT2LMHeadModel"])).name == "embed"
    assert detect_task(tmp_path, LlamaConfig(architectures=["LlamaForSequenceClassification"])).name == "classify"


@pytest.mark.parametrize("config", [T5Config(architectures=["T5ForConditionalGeneration"]), BartConfig(architectures=["BartModel"])])
def test_rejects_encoder_decoder(config, tmp_path):
    with pytest.raises(UnsupportedModel, match="unsupported architecture .*: an encoder-decoder model"):
        detect_task(tmp_path, config)


def test_reads_sentence_transformers_settings():
    assert read_sentence_transformers(default_model_dir())[:3] == ("mean", True, 256)


def sentence_transformers_dir(tmp_path, modules: list[str], pooling: dict | None = None, settings: dict | None = None):
    """The embedded MiniLM with its sentence-transformers files rewritten: ``modules`` by type name."""
    directory = tmp_path / "st"
    shutil.copytree(default_model_dir(), directory)
    entries = [
        {"idx": i, "name": str(i), "path": "" if kind == "Transformer" else f"{i}_{kind}", "type": f"sentence_transformers.models.{kind}"}
        for i, kind in enumerate(modules)
    ]
    (directory / "modules.json").write_text(json.dumps(entries))
    for entry in entries:
        if entry["path"]:
            (directory / entry["path"]).mkdir(exist_ok=True)
    if pooling is not None:
        (directory / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 384, **pooling}))
    if settings is not None:
        (directory / "config_sentence_transformers.json").write_text(json.dumps(settings))
    return directory


@pytest.mark.parametrize(
    "modules, pooling, settings, expected",
    [
        (["Transformer", "Pooling", "LayerNorm"], None, None, "'2_LayerNorm' (sentence_transformers.models.LayerNorm) is not reproduced"),
        (["Transformer", "Pooling", "CNN"], None, None, "'2_CNN' (sentence_transformers.models.CNN) is not reproduced"),
        (["Transformer", "Pooling"], {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True}, None, "pooling_mode_cls_token + "),
        (["Transformer", "Pooling"], {"pooling_mode_mean_tokens": True, "include_prompt": False}, None, "include_prompt: false"),
    ],
)
def test_a_pipeline_it_would_compute_differently_is_refused(tmp_path, capsys, modules, pooling, settings, expected):
    directory = sentence_transformers_dir(tmp_path, modules, pooling, settings)
    before = _store_size()
    assert main(["--path", str(directory), "--name", "bad", "--no-onnx"]) == 1
    err = capsys.readouterr().err.strip()
    assert expected in err and "\n" not in err, err
    assert _store_size() == before


def test_a_pipeline_it_reproduces_is_read(tmp_path):
    directory = sentence_transformers_dir(
        tmp_path,
        ["Transformer", "Pooling"],
        {"pooling_mode_cls_token": True},
        {"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": "query"},
    )
    assert read_sentence_transformers(directory) == ("cls", False, 256, {"query": "query: ", "passage": "passage: "}, "query", ())


def test_default_import_records_the_spec(embed_tag):
    stored = bentoml.models.get(embed_tag)
    spec = ModelSpec.from_metadata(stored.info.metadata)
    assert spec == ModelSpec(
        task="embed",
        max_length=256,
        model_max_length=512,
        pooling="mean",
        normalize=True,
        dimensions=384,
        pad_id=0,
        source="sentence-transformers/all-MiniLM-L6-v2",
    )
    assert set(stored.info.metadata["versions"]) == {"transformers", "tokenizers", "torch", "bentoml"}
    assert stored.info.labels["task"] == "embed"
    assert (stored.path_of("tokenizer.json")) and (stored.path_of("model.safetensors"))


def test_classifier_import_records_labels(classify_tag, classifier_dir):
    spec = ModelSpec.from_metadata(bentoml.models.get(classify_tag).info.metadata)
    assert spec.task == "classify"
    assert spec.labels == ("NEGATIVE", "POSITIVE")
    assert spec.max_length == 512
    assert spec.source == str(classifier_dir)


def _store_size():
    return len(bentoml.models.list())


def _bad_dirs(tmp_path, classifier_dir):
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    (not_a_model / "notes.txt").write_text("hello")

    encoder_decoder = tmp_path / "encoder-decoder"
    encoder_decoder.mkdir()
    (encoder_decoder / "config.json").write_text(json.dumps({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"]}))

    no_tokenizer = tmp_path / "no-tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(classifier_dir / name, no_tokenizer / name)
    return {
        "no such directory": tmp_path / "missing",
        "not a transformers model": not_a_model,
        "unsupported architecture": encoder_decoder,
        "no usable tokenizer": no_tokenizer,
    }


def test_bad_inputs_fail_cleanly(tmp_path, classifier_dir, capsys, embed_tag):
    before = _store_size()
    for expected, path in _bad_dirs(tmp_path, classifier_dir).items():
        assert main(["--path", str(path), "--name", "bad"]) == 1
        err = capsys.readouterr().err.strip()
        assert expected in err, err
        assert "\n" not in err and "Traceback" not in err
    assert _store_size() == before


def test_max_length_is_set_at_import_within_the_models_limit(capsys):
    assert main(["--name", "minilm-128", "--max-length", "128", "--no-onnx"]) == 0
    assert ModelSpec.of(bentoml.models.get(capsys.readouterr().out.strip())).max_length == 128  # sentence-transformers' 256 otherwise
    before = _store_size()
    assert main(["--name", "bad", "--max-length", "1000", "--no-onnx"]) == 1
    assert capsys.readouterr().err.strip() == "import failed: --max-length 1000 is past the model's limit of 512 tokens"
    assert _store_size() == before


def test_classify_task_on_an_encoder_is_refused(capsys):
    assert main(["--task", "classify", "--name", "bad"]) == 1
    assert "ForSequenceClassification" in capsys.readouterr().err


@pytest.mark.slow  # a fresh interpreter imports the whole stack
def test_cli_subprocess_reports_failure_on_stderr(tmp_path):
    result = run_import("--path", str(tmp_path / "nope"))
    assert result.returncode == 1
    assert result.stderr.strip() == f"import failed: no such directory: {tmp_path / 'nope'}"
    assert result.stdout == ""


@pytest.fixture(scope="module")
def long_decoder_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("long-decoder")
    tokenizer = build_decoder_tokenizer(root / "tokenizer", ["a few words to learn merges from", "and a few more words"] * 20)
    config = Qwen3Config(vocab_size=400, intermediate_size=64, max_position_embeddings=32768, **LONG_DECODER)
    return build_decoder(root / "model", tokenizer, config)


def test_the_cap_is_the_longest_length_whose_pass_fits_memory():
    """Qwen3-0.6B's shape (16 heads, FFN 3,072): 2,560 of its 32,768; an encoder's 512 is never lowered."""
    qwen3 = shape_of(Qwen3Config(hidden_size=1024, intermediate_size=3072, num_attention_heads=16).to_dict(), "embed")
    assert memory_cap(32768, qwen3) == 2560
    assert pass_bytes(2560, qwen3) <= PASS_MEMORY < pass_bytes(2560 + 256, qwen3)
    assert memory_cap(512, shape_of(BertConfig().to_dict(), "embed")) == 512
    assert memory_cap(512, shape_of(BertConfig().to_dict(), "sparse")) == 512  # its vocabulary's logits too
    assert Settings.model_fields["token_budget"].default == REFERENCE_BUDGET


def test_a_decoder_with_a_32k_position_table_is_capped_at_import_and_its_texts_cut_to_it(long_decoder_dir):
    stored = bentoml.models.get(import_model(long_decoder_dir, name="long-decoder", onnx=False))
    spec = ModelSpec.of(stored)
    assert (spec.max_length, spec.model_max_length) == (LONG_DECODER_CAP, 32768)
    assert stored.info.metadata["max_length"] == LONG_DECODER_CAP and stored.info.metadata["model_max_length"] == 32768
    (encoded,) = TextTokenizer(stored.path, spec.max_length).encode(["words " * 5000])
    assert len(encoded.ids) == LONG_DECODER_CAP and encoded.truncated


def test_max_length_at_import_goes_past_the_cap_up_to_the_models_limit(long_decoder_dir, capsys):
    assert main(["--path", str(long_decoder_dir), "--name", "long-decoder-8k", "--max-length", "8192", "--no-onnx"]) == 0
    out, err = capsys.readouterr()
    assert ModelSpec.of(bentoml.models.get(out.strip())).max_length == 8192
    assert "--max-length 8192: one pass of a text that long holds about" in err
    assert main(["--path", str(long_decoder_dir), "--name", "bad", "--max-length", "40000", "--no-onnx"]) == 1
    assert capsys.readouterr().err.strip() == "import failed: --max-length 40000 is past the model's limit of 32768 tokens"


def test_a_model_stored_without_a_cap_still_loads_and_is_capped_as_an_import_would(long_decoder_dir):
    """Metadata written before the cap was recorded: the decoder's 32,768 is capped from its config.json; MiniLM's 256 stays."""
    stored = bentoml.models.get(import_model(long_decoder_dir, name="long-decoder-before", onnx=False))
    before = {key: value for key, value in stored.info.metadata.items() if key != "model_max_length"} | {"max_length": 32768}
    spec = ModelSpec.of(SimpleNamespace(info=SimpleNamespace(metadata=before), path=stored.path))
    assert (spec.max_length, spec.model_max_length) == (LONG_DECODER_CAP, 32768)
    minilm = {"task": "embed", "max_length": 256, "pooling": "mean", "normalize": True, "dimensions": 384}
    spec = ModelSpec.of(SimpleNamespace(info=SimpleNamespace(metadata=minilm), path=default_model_dir()))
    assert (spec.max_length, spec.model_max_length) == (256, 256)


def test_an_unreachable_hub_is_one_clear_error_naming_the_ways_around_it(monkeypatch):
    """huggingface_hub raises its HTTP client's own error when the Hub cannot be reached; the import's
    CLI reports OSError in one line (``train_import.cli.report``), so the download turns it into one."""
    import httpx2
    import huggingface_hub

    from models.store import download

    def unreachable(*args, **kwargs):
        raise httpx2.ConnectError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(huggingface_hub, "list_repo_files", unreachable)
    with pytest.raises(OSError, match="cannot reach the Hugging Face Hub for org/model") as error:
        download("org/model")
    assert "--path" in str(error.value) and "HF_HUB_OFFLINE=1" in str(error.value)


def sentencepiece_only_model(directory):
    """A tiny XLM-R whose tokenizer is only a sentencepiece model (trained here on the gate texts), as some
    XLM-R- and T5-based checkpoints ship it: no tokenizer.json."""
    import io

    import sentencepiece
    from transformers import AutoTokenizer, XLMRobertaConfig, XLMRobertaModel

    from tests.test_onnx import TEXTS

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXTS), model_writer=model, vocab_size=300, hard_vocab_limit=False, character_coverage=1.0
    )
    directory.mkdir(parents=True)
    (directory / "sentencepiece.bpe.model").write_bytes(model.getvalue())
    specials = {"bos_token": "<s>", "cls_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "unk_token": "<unk>"}
    specials["pad_token"] = "<pad>"
    config = {"tokenizer_class": "XLMRobertaTokenizer", "mask_token": "<mask>", "model_max_length": 128, **specials}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    size = len(AutoTokenizer.from_pretrained(str(directory)))
    shape = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 130}
    XLMRobertaModel(XLMRobertaConfig(vocab_size=size, **shape)).save_pretrained(directory)
    return directory


def test_a_sentencepiece_only_tokenizer_is_converted_at_import_to_the_pieces_sentencepiece_cuts(tmp_path):
    import sentencepiece
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    from models.selfcheck import PROBE_TEXTS

    source = sentencepiece_only_model(tmp_path / "xlmr")
    result = run_import("--path", str(source), "--name", "sentencepiece-only", "--no-onnx")
    assert result.returncode == 0, result.stderr
    stored = bentoml.models.get(result.stdout.strip()).path
    reference = sentencepiece.SentencePieceProcessor(model_file=str(source / "sentencepiece.bpe.model"))
    converted = Tokenizer.from_file(f"{stored}/tokenizer.json")
    texts = [*PROBE_TEXTS, "two  spaces", " a leading one", "déjà vu"]
    assert [converted.encode(t, add_special_tokens=False).tokens for t in texts] == [reference.encode(t, out_type=str) for t in texts]
    served = [e.ids.tolist() for e in TextTokenizer(stored, 128).encode(texts)]
    assert served == AutoTokenizer.from_pretrained(str(source))(texts, truncation=True, max_length=128)["input_ids"]


def test_a_conversion_that_cuts_other_pieces_than_sentencepiece_is_refused_naming_the_text(tmp_path):
    from models.store import check_conversion

    source = sentencepiece_only_model(tmp_path / "xlmr")
    with pytest.raises(UnsupportedModel, match=r"reads '\?' as \['▁x'\] where sentencepiece reads"):
        check_conversion(source, SimpleNamespace(tokenize=lambda text: ["▁x"]))
    (source / "tokenizer.json").write_text("{}")  # a checkpoint's own fast tokenizer is served as it is
    check_conversion(source, SimpleNamespace(tokenize=lambda text: ["▁x"]))
