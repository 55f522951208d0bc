"""Every patch textbento makes to another library's internals, behind one ``apply()``.

Each patch was read from, and is tested against, one version of the library it patches
(``WRITTEN_FOR``); ``apply()`` refuses to start on any other, naming the library and both versions.
tests/test_compat.py holds, per patch, a test of the upstream behaviour it corrects: when an
upgrade fixes that behaviour upstream, the test fails and says which patch can go.

- ``bentoml_batcher``      BentoML's adaptive batcher without its learned idle wait or its polling, fed by the socket hop too
- ``bentoml_arbiter``      the services' Unix sockets kept until the supervisor's processes have stopped; a dead process replaced at once
- ``bentoml_requests``     a media type per class, the timeout timer cancelled, failed requests and probes answered, spans when exported
- ``bentoml_metrics``      BentoML's HTTP metrics labelled by route template, not raw path
- ``uvicorn_connections``  headers and body deadlines and a keep-alive per service, on uvicorn's httptools protocol
- ``bentoml_internals``    what is read of BentoML's internals unchanged (GPUs, tracer provider), and ``NEVER_RECYCLE``
- ``openvino_telemetry``   OpenVINO's usage telemetry declined, where OpenVINO is installed

No module outside this package imports a library's internals (tests/test_compat.py holds that too).
"""

from __future__ import annotations

from importlib import metadata

from . import bentoml_arbiter, bentoml_batcher, bentoml_metrics, bentoml_requests, openvino_telemetry, uvicorn_connections
from .bentoml_batcher import batcher
from .bentoml_internals import NEVER_RECYCLE

__all__ = ["NEVER_RECYCLE", "WRITTEN_FOR", "IncompatibleVersion", "apply", "batcher"]

# The versions these patches were read from and tested against (pinned in requirements/serve-*.txt and constraints.txt).
WRITTEN_FOR = {
    "bentoml": "1.4.40",  # every module but uvicorn_connections (bentoml_arbiter: with the circus it requires)
    "uvicorn": "0.54.0",  # uvicorn_connections: its httptools protocol's callbacks and timers
    "fastapi": "0.165.0",  # bentoml_metrics: the routes of an included router
    "starlette": "1.10.0",  # bentoml_metrics (route matching), bentoml_requests (the timeout's 504)
}
# Optional libraries, checked where installed (OpenVINO is not in the CPU image; requirements-dev.txt installs it).
WRITTEN_FOR_WHERE_INSTALLED = {
    "openvino-telemetry": "2025.2.0",  # openvino_telemetry: its consent check
}
PATCHED = {**WRITTEN_FOR, **WRITTEN_FOR_WHERE_INSTALLED}  # every library patched here: its version


class IncompatibleVersion(RuntimeError):
    """A patched library is installed at another version than its patches were written for."""


def installed_version(library: str) -> str | None:
    try:
        return metadata.version(library)
    except metadata.PackageNotFoundError:
        return None


def check_versions() -> None:
    """Refuses (``IncompatibleVersion``) when any patched library's installed version is not the one its patches were written for."""
    mismatched = [
        f"{library} {installed} is installed, serving/compat patches {library} {expected}"
        for library, expected in PATCHED.items()
        if (installed := installed_version(library)) != expected and (installed is not None or library in WRITTEN_FOR)
    ]
    if mismatched:
        raise IncompatibleVersion(
            "; ".join(mismatched) + ". Install the pinned versions (requirements/serve-cpu.txt), or check each patch against "
            "the installed one (tests/test_compat.py) and update serving/compat.WRITTEN_FOR."
        )


def apply() -> None:
    """Checks the patched libraries' versions, then applies every patch in this process (twice changes nothing)."""
    check_versions()
    bentoml_arbiter.apply()
    bentoml_batcher.apply()
    bentoml_requests.apply()
    bentoml_metrics.apply()
    uvicorn_connections.apply()
    openvino_telemetry.apply()
