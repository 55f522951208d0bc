"""Models built offline for tests and benchmarks: random (seeded) weights, real shapes.

DistilBERT-SST2-shaped classifiers and small BERTs with the uncased BERT vocab; decoders (Qwen3,
Llama, ...) of any shape with a byte-level BPE tokenizer trained on the spot. Right for parity tests
and benchmarks (same shapes, same cost as the real model), not for accuracy.
"""

from __future__ import annotations

from pathlib import Path

from models.store import default_model_dir

LABELS = {0: "NEGATIVE", 1: "POSITIVE"}
SIZES = {
    "small": {"dim": 64, "n_layers": 2, "n_heads": 2, "hidden_dim": 128},  # for fast tests
    "full": {},  # DistilBertConfig's defaults: 768 wide, 6 layers, 66M parameters, as the real one
}


def build_tiny_bert(directory: Path, model_class=None) -> Path:
    """A 32-wide, 2-layer BERT (``BertModel``, or ``model_class``: ``BertForMaskedLM``, ...) with the
    embedded model's vocabulary, seeded, saved with its tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(default_model_dir()))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    (model_class or BertModel)(config).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def build_splade(directory: Path, mlm_dir: Path, pooling: str = "max", activation: str = "relu"):
    """A sentence-transformers SPLADE ``SparseEncoder`` on the masked LM in ``mlm_dir``, saved in ``directory``; the model."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.models import MLMTransformer, SpladePooling

    modules = [MLMTransformer(str(mlm_dir), max_seq_length=64), SpladePooling(pooling, activation_function=activation)]
    model = SparseEncoder(modules=modules, device="cpu")
    model.save(str(directory))
    return model


def build_bert_classifier(directory: Path, **config) -> Path:
    """A small BERT classifier (32 wide, 2 layers, token types) with the embedded model's vocabulary.

    The type embeddings and the head are drawn wider than BERT's initialisation (std 0.02), which
    would give nearly one logit for every input and hide what token types and activations change.
    """
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(default_model_dir()))
    bert = BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, **config
    )
    model = BertForSequenceClassification(bert).eval()
    with torch.no_grad():
        model.bert.embeddings.token_type_embeddings.weight.normal_(0, 1)
        model.classifier.weight.normal_(0, 1)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def build_classifier(directory: Path, size: str = "small") -> Path:
    """Saves a classifier and its tokenizer with ``save_pretrained`` into ``directory``."""
    import torch
    from transformers import DistilBertConfig, DistilBertForSequenceClassification, DistilBertTokenizerFast

    torch.manual_seed(0)
    config = DistilBertConfig(id2label=LABELS, label2id={v: k for k, v in LABELS.items()}, **SIZES[size])
    DistilBertForSequenceClassification(config).save_pretrained(directory)
    DistilBertTokenizerFast.from_pretrained(str(default_model_dir()), model_max_length=512).save_pretrained(directory)
    return directory


EOS = "<|endoftext|>"


def build_decoder_tokenizer(directory: Path, corpus: list[str], vocab_size: int = 400) -> Path:
    """A byte-level BPE (Qwen's kind) trained on ``corpus``, saved as a Qwen2 fast tokenizer.

    Its post-processor appends the EOS to every text and to both texts of a pair, as
    Qwen3-Embedding's does, and the EOS is its pad token too, as there. It sets no length limit:
    the model's position table does.
    """
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer
    from transformers import Qwen2TokenizerFast

    tokenizer = Tokenizer(BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, "<|im_end|>"], initial_alphabet=alphabet, show_progress=False)
    tokenizer.train_from_iterator(corpus, trainer)
    append_eos = processors.TemplateProcessing(
        single=f"$A:0 {EOS}:0", pair=f"$A:0 {EOS}:0 $B:1 {EOS}:1", special_tokens=[(EOS, tokenizer.token_to_id(EOS))]
    )
    tokenizer.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False), append_eos])
    Qwen2TokenizerFast(tokenizer_object=tokenizer, eos_token=EOS, pad_token=EOS, unk_token=None, bos_token=None).save_pretrained(directory)
    return directory


def build_decoder(directory: Path, tokenizer_dir: Path, config, model_class=None) -> Path:
    """A model of ``config`` (``AutoModel``'s class, or ``model_class``) with random weights drawn from
    seed 0, and the tokenizer in ``tokenizer_dir``, saved with ``save_pretrained`` into ``directory``."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(0)
    (model_class or AutoModel).from_config(config).eval().save_pretrained(directory)
    AutoTokenizer.from_pretrained(str(tokenizer_dir)).save_pretrained(directory)
    return directory


CUSTOM_CODE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "rotary_encoder"


def build_custom_code_encoder(directory: Path, position_scheme: str = "rotary") -> Path:
    """A sentence embedder whose architecture is code beside its weights (``auto_map``, as nomic-embed,
    jina-embeddings and gte ship theirs): ``tests/fixtures/rotary_encoder``'s encoder with rotary positions
    (nomic-bert's) or ALiBi (``"alibi"``, jina-bert-v2's), random weights, the embedded model's tokenizer,
    mean pooling and Normalize."""
    import json
    import shutil

    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    directory.mkdir(parents=True, exist_ok=True)
    for code in ("configuration_rotary.py", "modeling_rotary.py"):
        shutil.copy(CUSTOM_CODE / code, directory / code)
    tokenizer = AutoTokenizer.from_pretrained(str(default_model_dir()))
    auto_map = {"AutoConfig": "configuration_rotary.RotaryEncoderConfig", "AutoModel": "modeling_rotary.RotaryEncoderModel"}
    config = {
        "model_type": "rotary-encoder",
        "architectures": ["RotaryEncoderModel"],
        "auto_map": auto_map,
        "position_scheme": position_scheme,
    }
    (directory / "config.json").write_text(json.dumps({**config, "vocab_size": tokenizer.vocab_size, "max_position_embeddings": 512}))
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(str(directory), trust_remote_code=True)
    AutoModel.from_config(config, trust_remote_code=True).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (directory / "modules.json").write_text(json.dumps(modules))
    (directory / "1_Pooling").mkdir(exist_ok=True)
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 64, "pooling_mode_mean_tokens": True}))
    (directory / "2_Normalize").mkdir(exist_ok=True)
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    return directory
