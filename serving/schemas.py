"""BentoML 1.4.40 works out an IO model's media type from its JSON schema, built anew (a pydantic
``TypeAdapter`` and its schema) for every answer of every call: 1.0 ms of CPU per Encoder call on
the reference machine (docs/design.md 8), on the path of every request. The media type depends only
on the class, so each class's is worked out once.
"""

from __future__ import annotations

from functools import cache

from _bentoml_sdk import io_models


def cache_media_types() -> None:
    """Every IO model's ``mime_type()`` computed once per class from now on.

    Refuses to start when the installed BentoML no longer has what this replaces (tests/test_dispatch.py pins it too).
    """
    mime_type = getattr(io_models.IOMixin, "mime_type", None)
    if mime_type is None or not hasattr(mime_type, "__func__"):
        raise RuntimeError("BentoML's IO models changed: serving/schemas.py no longer applies; re-measure the media type's cost")
    if not hasattr(mime_type.__func__, "cache_info"):
        io_models.IOMixin.mime_type = classmethod(cache(mime_type.__func__))
