"""Request and response models: what is accepted, what is refused and how errors name the field."""

import pytest
from pydantic import ValidationError

from api.types import ClassifyRequest, EmbeddingsRequest, SentimentRequest


def test_single_text_becomes_a_list():
    assert ClassifyRequest(inputs="hi").inputs == ["hi"]
    assert EmbeddingsRequest(input=["a", "b"]).input == ["a", "b"]


@pytest.mark.parametrize(
    ("body", "location"),
    [
        ({"inputs": ""}, ("inputs", 0)),
        ({"inputs": []}, ("inputs",)),
        ({"inputs": [None]}, ("inputs", 0)),
        ({"inputs": [1]}, ("inputs", 0)),
        ({"inputs": "x", "top_k": 0}, ("top_k",)),
        ({"inputs": "x", "input": "typo"}, ("input",)),
        ({}, ("inputs",)),
    ],
)
def test_classify_rejects(body, location):
    with pytest.raises(ValidationError) as error:
        ClassifyRequest.model_validate(body)
    assert error.value.errors()[0]["loc"] == location


def test_embeddings_accepts_openai_fields_and_rejects_unknown_formats():
    request = EmbeddingsRequest(input="x", model="m", encoding_format="base64", user="u", dimensions=384)
    assert request.encoding_format == "base64"
    with pytest.raises(ValidationError):
        EmbeddingsRequest(input="x", encoding_format="int4")


def test_sentiment_needs_text():
    with pytest.raises(ValidationError):
        SentimentRequest.model_validate({"text": ""})
