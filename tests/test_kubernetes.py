"""deploy/kubernetes: valid against the Kubernetes API schemas (bundled with kubernetes-validate, so
offline), and wired together: selectors find the pods, probes hit BentoML's health routes, pods drain
before they are killed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from serving.settings import Settings

BASE = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes" / "base"
GPU = BASE.parent / "overlays" / "gpu"
# A cluster version still common on managed services, and the newest the validator knows.
VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
FLAVOURS = ["cpu", "gpu"]
PRESTOP_S = 5


def read(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def key(resource: dict) -> tuple[str, str]:
    return resource["kind"], resource["metadata"]["name"]


def merge(base, patch):
    """Kustomize's strategic merge as far as these manifests need it: maps merge, lists of named
    items (containers, env) merge by name, anything else is replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        return {**base, **{k: merge(base[k], v) if k in base else v for k, v in patch.items()}}
    if isinstance(base, list) and isinstance(patch, list) and all(isinstance(i, dict) and "name" in i for i in base + patch):
        patches = {item["name"]: item for item in patch}
        return [merge(item, patches.pop(item["name"])) if item["name"] in patches else item for item in base] + list(patches.values())
    return patch


def resources(flavour: str) -> dict[tuple[str, str], dict]:
    """The flavour's resources by (kind, name): the base, or the base with the GPU overlay's patches."""
    rendered = {key(r): r for r in (read(BASE / name) for name in read(BASE / "kustomization.yaml")["resources"])}
    if flavour == "gpu":
        overlay = read(GPU / "kustomization.yaml")
        assert overlay["resources"] == ["../../base"]
        for patch in (read(GPU / entry["path"]) for entry in overlay["patches"]):
            rendered[key(patch)] = merge(rendered[key(patch)], patch)
    return rendered


def pod_spec(flavour: str) -> dict:
    return resources(flavour)["Deployment", "textbento"]["spec"]["template"]["spec"]


def test_every_manifest_is_in_a_kustomization():
    assert {p.name for p in BASE.glob("*.yaml")} == {"kustomization.yaml", *read(BASE / "kustomization.yaml")["resources"]}
    patches = [entry["path"] for entry in read(GPU / "kustomization.yaml")["patches"]]
    assert {p.name for p in GPU.glob("*.yaml")} == {"kustomization.yaml", *patches}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_valid_against_the_api_schema(flavour, version):
    """Strict: an unknown (misspelt) field is an error, not silently dropped by the API server."""
    for resource in resources(flavour).values():
        kubernetes_validate.validate(resource, version, strict=True)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_service_hpa_and_pdb_find_the_pods(flavour):
    found = resources(flavour)
    deployment, service = found["Deployment", "textbento"], found["Service", "textbento"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    budget = found["PodDisruptionBudget", "textbento"]
    for selector in (deployment["spec"]["selector"]["matchLabels"], budget["spec"]["selector"]["matchLabels"], service["spec"]["selector"]):
        assert selector.items() <= labels.items()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= {p["name"] for p in container["ports"]}
    target = found["HorizontalPodAutoscaler", "textbento"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == key(deployment)
    assert "replicas" not in deployment["spec"]  # the HPA owns the count


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_pods_probe_drain_and_run_unprivileged(flavour):
    spec = pod_spec(flavour)
    (container,) = spec["containers"]
    probes = {name: container[name]["httpGet"] for name in ("readinessProbe", "livenessProbe", "startupProbe")}
    assert {name: (get["path"], get["port"]) for name, get in probes.items()} == {
        "readinessProbe": ("/readyz", "http"),
        "livenessProbe": ("/livez", "http"),
        "startupProbe": ("/livez", "http"),
    }
    env = {e["name"]: e for e in container["env"]}
    served = Settings(timeout_s=int(env["TEXTBENTO_TIMEOUT_S"]["value"]), keep_alive_s=float(env["TEXTBENTO_KEEP_ALIVE_S"]["value"]))
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", str(PRESTOP_S)]
    # preStop, then the longest a request accepted before SIGTERM may still run, which the Encoder outlives.
    assert spec["terminationGracePeriodSeconds"] >= PRESTOP_S + max(served.backstop_timeout_s, served.drain_longest_s)
    assert served.keep_alive_s > 60  # outlasts the idle timeout of the proxies in front (ingress-nginx, cloud LBs: 60 s)
    assert env["TEXTBENTO_WORKERS"]["valueFrom"]["resourceFieldRef"]["resource"] == "requests.cpu"  # not the node's cores
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_only_the_gpu_flavour_asks_for_one_gpu():
    limits = {flavour: pod_spec(flavour)["containers"][0]["resources"]["limits"] for flavour in FLAVOURS}
    assert (limits["cpu"].get("nvidia.com/gpu"), limits["gpu"].get("nvidia.com/gpu")) == (None, 1)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (for kustomize) is not installed")
def test_the_overlay_renders_as_kustomize_renders_it():
    """Checks ``merge`` above against the real kustomize, where there is one."""
    output = subprocess.run(["kubectl", "kustomize", str(GPU)], capture_output=True, text=True, check=True).stdout
    assert {key(r): r for r in yaml.safe_load_all(output)} == resources("gpu")
