"""DistilBERT-SST2-shaped classifiers built offline: random (seeded) weights, the uncased BERT vocab.

Right for parity tests and benchmarks (same shapes, same cost as the real model), not for accuracy.
"""

from __future__ import annotations

from pathlib import Path

from models.store import default_model_dir

LABELS = {0: "NEGATIVE", 1: "POSITIVE"}
SIZES = {
    "small": {"dim": 64, "n_layers": 2, "n_heads": 2, "hidden_dim": 128},  # for fast tests
    "full": {},  # DistilBertConfig's defaults: 768 wide, 6 layers, 66M parameters, as the real one
}


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
