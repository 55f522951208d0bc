"""The rule of each package (its docstring says it), held to every import in its modules.

- ``models/``: what the model does; no HTTP, no BentoML internals, neither ``api`` nor ``serving``.
- ``api/``: the HTTP surface; no inference runtime (an API worker never loads one).
- ``serving/``: the BentoML plumbing; no inference runtime, no FastAPI.
- ``harness/``: drives the service from outside, as a user would; none of its code.
- ``bulk/``: runs the models in process; no service, no HTTP.
- ``reliability/``: the reliability batteries, from outside like ``harness``; neither ``api`` nor ``service``.

The product (``api``, ``models``, ``serving``, ``bulk``) imports none of the lab (``harness``, ``bench``,
``reliability``, ``tests``), and the lab's shared packages import nothing from ``bench``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIMES = ("torch", "onnxruntime", "onnx", "transformers", "safetensors")
LAB = ("harness", "bench", "reliability", "tests")
FORBIDDEN = {
    "models": ("bentoml._internal", "_bentoml_impl", "_bentoml_sdk", "fastapi", "starlette", "aiohttp", "uvicorn", "api", "serving", *LAB),
    "api": (*RUNTIMES, *LAB),
    "serving": (*RUNTIMES, "fastapi", *LAB),
    "harness": ("api", "serving", "service", "bench", "reliability"),
    "bulk": ("service", "fastapi", "starlette", "aiohttp", "uvicorn", "bentoml._internal", "_bentoml_impl", "_bentoml_sdk", *LAB),
    "reliability": ("api", "service", "bench"),
}


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_module_imports_what_its_package_rules_out(package):
    broken = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in sorted(imported_modules(path))
        if any(name == banned or name.startswith(banned + ".") for banned in FORBIDDEN[package])
    ]
    assert not broken


def test_an_api_worker_loads_no_inference_runtime():
    """What the API workers import, followed to the end: none of it pulls a runtime in."""
    script = (
        "import sys, api.errors, api.middleware, api.types, serving.telemetry, serving.coalesce, serving.hop; "
        f"print([name for name in {RUNTIMES!r} if name in sys.modules])"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_each_package_says_its_rule():
    for package in FORBIDDEN:
        assert "rule" in (ROOT / package / "__init__.py").read_text().lower(), package


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def internal_imports(path: Path, modules: set[str]) -> set[str]:
    """The project modules ``path`` imports, at any depth of its code (imports inside functions, and those
    only type checkers read, ``if TYPE_CHECKING:``, too: a circle of types is a circle)."""
    tree, package = ast.parse(path.read_text()), module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*package[: len(package) - node.level + 1], node.module or ""] if node.level else [node.module or ""]).strip(
                "."
            )
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {name for name in names if name in modules}
    return found - {module_name(path)}


def test_no_import_circles_inside_the_packages():
    """An import circle hides behind imports inside functions and costs types (``Any`` where a class belongs)."""
    paths = [path for package in FORBIDDEN for path in (ROOT / package).rglob("*.py")]
    modules = {module_name(path) for path in paths}
    graph = {module_name(path): internal_imports(path, modules) for path in paths}
    circles = []

    def visit(module: str, trail: list[str]) -> None:
        for imported in sorted(graph.get(module, ())):
            if imported in trail:
                circles.append(" → ".join([*trail[trail.index(imported) :], imported]))
            elif len(trail) < len(graph):
                visit(imported, [*trail, imported])

    for module in sorted(graph):
        visit(module, [module])
    assert not circles, sorted(set(circles))[:5]


def test_refusals_are_built_in_the_flow_module_and_the_error_mapping_only():
    """Who waits, who is refused, who is dropped: one module decides (``api/flow.py``); ``api/errors.py`` maps the Encoder's own errors."""
    product = [ROOT / "service.py", *(path for package in ("api", "models", "serving", "bulk") for path in (ROOT / package).rglob("*.py"))]
    building = {path.relative_to(ROOT).as_posix() for path in product if re.search(r"APIError\(\s*(429|503|504)\b", path.read_text())}
    assert building == {"api/flow.py", "api/errors.py"}
