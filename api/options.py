"""Embedding options beside OpenAI's: sentence-transformers' prompts (by name, by the texts' role, by
Jina's task), and Matryoshka dimensions.

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


# The sentence-transformers prompt names each input type (Cohere's, NVIDIA NIM's) maps to: the first the model has.
ROLE_PROMPTS: dict[str, tuple[str, ...]] = {
    "search_query": ("search_query", "query"),
    "query": ("query", "search_query"),
    "search_document": ("search_document", "document", "passage", "corpus"),
    "passage": ("passage", "document", "search_document", "corpus"),
    "classification": ("classification",),
    "clustering": ("clustering",),
}


def role_prompt(spec: ModelSpec, input_type: str | None) -> str:
    """The model's prompt for the texts' role: the first of ``ROLE_PROMPTS`` it has, else its default prompt."""
    name = next((name for name in ROLE_PROMPTS.get(input_type or "", ()) if name in spec.prompts), None)
    return prompt_for(spec, name, None)


def request_prompt(spec: ModelSpec, **asked: str | None) -> str:
    """The text put before every input from the one way a request names it (400 for two): ``prompt``,
    ``prompt_name``, ``input_type`` (a role: ``role_prompt``) or Jina's ``task`` (the name of one of
    the model's prompts, as jina-embeddings-v3 names its prompts by task)."""
    given = [name for name, value in asked.items() if value is not None]
    if len(given) > 1:
        raise APIError(400, "invalid_request", f"give one of {' or '.join(given)}, not several", given[0])
    if asked.get("input_type") is not None:
        return role_prompt(spec, asked["input_type"])
    if (task := asked.get("task")) is not None:
        if task not in spec.prompts:
            known = ", ".join(sorted(spec.prompts)) or "none"
            raise APIError(400, "invalid_request", f"this model has no prompt for task {task!r}; its prompts: {known}", "task")
        return spec.prompts[task]
    return prompt_for(spec, asked.get("prompt_name"), asked.get("prompt"))


def check_dimensions(spec: ModelSpec, dimensions: int | None) -> None:
    """400 for more dimensions than the model has; fewer are cut (``models.postprocess.matryoshka_prefix``)."""
    if dimensions is not None and spec.dimensions is not None and dimensions > spec.dimensions:
        raise APIError(400, "invalid_request", f"dimensions must be at most {spec.dimensions} for this model", "dimensions")
