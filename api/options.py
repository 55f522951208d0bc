"""Embedding options beside OpenAI's: sentence-transformers' prompts, and Matryoshka dimensions.

Both are resolved before any work is queued, so that a bad option is a 400 naming it.
"""

from __future__ import annotations

from models.spec import ModelSpec

from .errors import APIError


def prompt_for(spec: ModelSpec, prompt_name: str | None, prompt: str | None) -> str:
    """The text put before every input: ``prompt``, the named prompt, or the model's default ("" without one).

    As sentence-transformers' ``encode(prompt=, prompt_name=)``, except that giving both is an
    error here rather than a logged warning.
    """
    if prompt is not None and prompt_name is not None:
        raise APIError(400, "invalid_request", "give prompt or prompt_name, not both", "prompt")
    if prompt is not None:
        return prompt
    if prompt_name is not None:
        if prompt_name not in spec.prompts:
            known = ", ".join(sorted(spec.prompts)) or "none"
            raise APIError(400, "invalid_request", f"unknown prompt_name {prompt_name!r}; this model's prompts: {known}", "prompt_name")
        return spec.prompts[prompt_name]
    return spec.prompts[spec.default_prompt_name] if spec.default_prompt_name else ""


def check_dimensions(spec: ModelSpec, dimensions: int | None) -> None:
    """400 for more dimensions than the model has; fewer are cut (``models.postprocess.matryoshka_prefix``)."""
    if dimensions is not None and spec.dimensions is not None and dimensions > spec.dimensions:
        raise APIError(400, "invalid_request", f"dimensions must be at most {spec.dimensions} for this model", "dimensions")
