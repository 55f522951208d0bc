"""serving.gpus against BentoML's own allocator: a GPU per model when there are enough, else all share the first."""

from __future__ import annotations

import pytest
from _bentoml_impl.server.allocator import ResourceAllocator

from serving import gpus


@pytest.mark.parametrize(
    ("gpus_here", "models", "placed"), [(4, 3, ["0", "1", "2"]), (3, 3, ["0", "1", "2"]), (2, 3, ["0"] * 3), (1, 2, ["0"] * 2)]
)
def test_each_models_encoder_gets_a_gpu_of_its_own_or_a_share_of_the_first(monkeypatch, gpus_here, models, placed):
    resources = {"cpu": 2.0, "nvidia.com/gpu": list(range(gpus_here))}
    monkeypatch.setattr(gpus, "system_resources", lambda: resources)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr("_bentoml_impl.server.allocator.system_resources", lambda: resources)
    allocator, share = ResourceAllocator(), gpus.gpu_share(models)
    config = {f"encoder-{i}": {"workers": 1, "resources": {"gpu": share}} for i in range(models)}
    service = type("Named", (), {})
    visible = []
    for name in config:
        service.name = name
        _, env = allocator.get_worker_env(service, services=config)
        visible.append(env["CUDA_VISIBLE_DEVICES"])
    assert visible == placed
