"""PyTorch backend: CUDA with fp16 when a GPU is present, CPU fp32 with an explicit thread count otherwise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..batching import split_segments
from ..detection import UnsupportedModel, custom_code
from ..postprocess import load_dense
from ..spec import ModelSpec
from ..tasks import task_of


class TorchBackend:
    """A transformers model in ``inference_mode``, loaded once per Encoder process."""

    name = "torch"
    fidelity = None
    trials = ()

    def __init__(self, model_dir: str | Path, spec: ModelSpec, threads: int, trust_remote_code: bool = False) -> None:
        """``trust_remote_code``: a custom-code model's code may run here (else it is refused: ONNX serves it)."""
        code = custom_code(Path(model_dir))
        if code and not trust_remote_code:
            raise UnsupportedModel(
                f"{model_dir} is a custom-code model ({', '.join(code)}): the torch backend would run its code; it is served "
                "from its ONNX graphs (the default backends), or by torch with TEXTBENTO_TRUST_REMOTE_CODE=1"
            )
        self.spec = spec
        self.dense = load_dense(model_dir, spec.dense)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        # torch defaults to every core it sees; the Encoder shares them with tokenizer workers.
        torch.set_num_threads(threads)
        dtype = torch.float16 if self.device == "cuda" else torch.float32
        self.precision = "fp16" if self.device == "cuda" else "fp32"
        self.task = task_of(spec)
        self.model = (
            self.task.model_class().from_pretrained(str(model_dir), dtype=dtype, trust_remote_code=bool(code)).to(self.device).eval()
        )
        self.model.config.use_cache = False  # a decoder would keep every pass's keys and values, for generation
        # What the ONNX graph computes, in torch (``models.heads``): SPLADE pools its MLM logits, a multi-vector model projects its tokens.
        self.graph = self.task.graph_module(self.model, spec, model_dir)

    def forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        input_ids, token_type_ids = split_segments(input_ids)
        # Only for models with token types: the others (DistilBERT, ...) refuse the argument.
        types = {"token_type_ids": torch.from_numpy(token_type_ids).to(self.device)} if self.spec.token_types else {}
        ids, mask = torch.from_numpy(input_ids).to(self.device), torch.from_numpy(attention_mask).to(self.device)
        with torch.inference_mode():
            output = self.graph(ids, mask, **types).float().cpu().numpy()
        return self.task.graph_answer(self.spec, output, attention_mask, self.dense, input_ids.shape[1])
