"""serving.wiring: the per-model class attributes BentoML reads, made in one place."""

import bentoml
import pytest

from serving.wiring import depends_on_each, encoder_service, encoders_of

pytestmark = pytest.mark.slow  # needs a stored model: BentoML resolves a service's models as it makes it


class Echo:
    """A stand-in Encoder."""

    model: bentoml.models.BentoModel

    @bentoml.api
    def ping(self) -> str:
        return self.model.tag.name


def test_each_model_gets_a_service_of_its_own_and_the_api_a_dependency_on_each(embed_tag, cross_encoder_tag):
    services = [encoder_service(Echo, tag, served=2) for tag in (embed_tag, cross_encoder_tag)]
    names = [tag.split(":")[0] for tag in (embed_tag, cross_encoder_tag)]
    assert [service.name for service in services] == [f"encoder-{name}" for name in names]
    assert [str(service.inner.model.tag) for service in services] == [embed_tag, cross_encoder_tag]
    assert Echo.__dict__.get("model") is None and services[0].inner.__doc__ == Echo.__doc__  # the class itself is left as it was
    assert encoder_service(Echo, embed_tag, served=1).name == "encoder"

    @depends_on_each(services)
    class Api:
        pass

    api = bentoml.service(name="api")(Api)
    assert set(api.dependencies) == {"encoder_0", "encoder_1"} and len(api.models) == 2  # what BentoML finds
    found = encoders_of(Api())
    assert [str(model.tag) for model, _ in found] == [embed_tag, cross_encoder_tag]
    assert all(callable(client) for _, client in found)  # looked up when first called, not here
