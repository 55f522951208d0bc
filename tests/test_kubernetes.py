"""deploy/kubernetes: valid against the Kubernetes API schemas (bundled with kubernetes-validate, so
offline), and wired together: selectors find the pods, probes hit BentoML's health routes, pods drain
before they are killed. Hardened: the image's own non-root user, a read-only root with a volume for
every path the server writes, keys from a required Secret as a file, ingress on the HTTP port only and
no egress. The last test serves the model in the pod's filesystem, built from the manifest."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import NamedTuple

import kubernetes_validate
import pytest
import requests
import yaml
from bentoml._internal.container.generate import BENTO_HOME, BENTO_PATH, BENTO_UID_GID

from harness.serving import ServerExited, free_port, stop_group, wait_ready
from serving.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "deploy" / "kubernetes" / "base"
GPU = BASE.parent / "overlays" / "gpu"
# A cluster version still common on managed services, and the newest the validator knows.
VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
FLAVOURS = ["cpu", "gpu"]
PRESTOP_S = 5
# Kubernetes quantity suffixes, the two-letter ones first.
UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
KEPT_LOGS_BYTES = 5 * 10 * 2**20  # the kubelet's default log rotation (containerLogMaxFiles × containerLogMaxSize)


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


def the_container(spec: dict) -> dict:
    (container,) = spec["containers"]
    return container


def quantity(text: str | int) -> int:
    """A Kubernetes quantity as a number (of bytes, for storage)."""
    text = str(text)
    for suffix, factor in UNITS.items():
        if text.endswith(suffix):
            return int(float(text.removesuffix(suffix)) * factor)
    return int(text)


def env_values(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def volume_at(spec: dict, container: dict, path: str) -> tuple[dict, dict] | tuple[None, None]:
    """The container's volume mount that holds ``path`` (the deepest), and its volume."""
    mounts = [m for m in container.get("volumeMounts", []) if PurePosixPath(path).is_relative_to(m["mountPath"])]
    if not mounts:
        return None, None
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    return mount, next(v for v in spec["volumes"] if v["name"] == mount["name"])


def written_paths(container: dict) -> dict[str, str]:
    """Where ``bentoml serve`` and textbento write while serving, each with its writers (BentoML 1.4's and our
    sources; the last test serves in the pod's filesystem to catch any other)."""
    home = env_values(container).get("BENTOML_HOME", BENTO_HOME)  # the image sets BENTOML_HOME to its home
    return {
        home: "BentoML's home: bentos/, models/, envs/ and tmp/ made at start (_internal/configuration/containers.py)",
        f"{home}/prometheus_multiproc_dir": "the Prometheus multiprocess files, emptied at start (bentoml/serving.py "
        "ensure_prometheus_dir); the API workers' lone-call lock (serving/hop.py)",
        env_values(container).get("TMPDIR", "/tmp"): "tempfile: the Unix sockets to the Encoder (bentoml-uds-*, and "
        "textbento-* of serving/socket_hop.py), BentoML's client folders, the uint8 rewrite of an int8 graph past 2 GiB "
        "(models/backends/onnx_backend.py)",
    }


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


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_pods_run_as_the_images_user_with_no_privilege(flavour):
    spec = pod_spec(flavour)
    pod, container = spec["securityContext"], the_container(spec)["securityContext"]
    assert pod["runAsNonRoot"] is True
    # The user BentoML's Dockerfile makes and runs the image as: the bento and the venv are its files.
    assert pod["runAsUser"] == pod["runAsGroup"] == pod["fsGroup"] == BENTO_UID_GID
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["allowPrivilegeEscalation"] is False and not container.get("privileged")
    assert container["capabilities"] == {"drop": ["ALL"]}
    assert spec["automountServiceAccountToken"] is False  # no Kubernetes API token in the pod
    assert spec["enableServiceLinks"] is False  # no Service variables in BENTOML_ and TEXTBENTO_ (BENTOML_PORT is read)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_api_keys_are_a_file_from_a_required_secret(flavour):
    """No Secret, no pod: a server must not start without its keys, open to anyone. The keys are a file,
    never a variable (every child process inherits those)."""
    spec = pod_spec(flavour)
    container = the_container(spec)
    assert "envFrom" not in container
    assert not [e["name"] for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {}) or e["name"] == "TEXTBENTO_API_KEYS"]
    keys_file = env_values(container)["TEXTBENTO_API_KEYS_FILE"]
    mount, volume = volume_at(spec, container, keys_file)
    assert mount is not None, f"{keys_file} is on no volume"
    assert mount["readOnly"] is True
    secret = volume["secret"]
    assert secret["secretName"] == "textbento-api-keys"
    assert secret.get("optional", False) is False
    file_name = str(PurePosixPath(keys_file).relative_to(mount["mountPath"]))
    assert {item["path"]: item["key"] for item in secret["items"]} == {file_name: "keys"}
    assert secret["defaultMode"] & 0o040 and not secret["defaultMode"] & 0o007  # the pod's fsGroup reads it, no one else


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_root_is_read_only_and_every_written_path_a_bounded_volume(flavour):
    spec = pod_spec(flavour)
    container = the_container(spec)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    for path, writers in written_paths(container).items():
        mount, volume = volume_at(spec, container, path)
        assert mount is not None and "emptyDir" in volume and not mount.get("readOnly"), f"{path} ({writers}) is no writable volume"
    for mount in container["volumeMounts"]:  # none hides what the image brings: the bento, the venv
        assert not any(PurePosixPath(brought).is_relative_to(mount["mountPath"]) for brought in (BENTO_PATH, "/app/.venv"))
    disks = [volume["emptyDir"] for volume in spec["volumes"] if "emptyDir" in volume]
    assert all("sizeLimit" in disk for disk in disks)
    requests_, limits = container["resources"]["requests"], container["resources"]["limits"]
    assert quantity(requests_["ephemeral-storage"]) <= quantity(limits["ephemeral-storage"])
    # Past its limit the kubelet evicts the pod: the volumes on disk, full, and the logs it keeps fit under it.
    on_disk = sum(quantity(disk["sizeLimit"]) for disk in disks if disk.get("medium") != "Memory")
    assert on_disk + KEPT_LOGS_BYTES <= quantity(limits["ephemeral-storage"])


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_network_policy_admits_the_http_port_only_and_no_egress(flavour):
    found = resources(flavour)
    policy, deployment = found["NetworkPolicy", "textbento"]["spec"], found["Deployment", "textbento"]
    assert policy["podSelector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert sorted(policy["policyTypes"]) == ["Egress", "Ingress"]
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": "http"}]
    assert rule["from"]  # named sources (this namespace's pods), not everyone
    container = the_container(deployment["spec"]["template"]["spec"])
    assert [p["name"] for p in container["ports"]] == ["http"]  # what the Service, the probes and Prometheus reach
    assert policy["egress"] == []
    # Nothing in the pod calls out: no usage reports (BentoML), no telemetry (ONNX Runtime), no traces.
    env = env_values(container)
    assert (env["BENTOML_DO_NOT_TRACK"], env["ORT_DISABLE_TELEMETRY"]) == ("true", "1")
    assert not env.get("TEXTBENTO_OTLP_ENDPOINT")  # traces need the egress rules networkpolicy.yaml describes


def test_only_the_gpu_flavour_asks_for_one_gpu():
    limits = {flavour: pod_spec(flavour)["containers"][0]["resources"]["limits"] for flavour in FLAVOURS}
    assert (limits["cpu"].get("nvidia.com/gpu"), limits["gpu"].get("nvidia.com/gpu")) == (None, 1)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (for kustomize) is not installed")
def test_the_overlay_renders_as_kustomize_renders_it():
    """Checks ``merge`` above against the real kustomize, where there is one."""
    output = subprocess.run(["kubectl", "kustomize", str(GPU)], capture_output=True, text=True, check=True).stdout
    assert {key(r): r for r in yaml.safe_load_all(output)} == resources("gpu")


# The image's environment (BentoML's Dockerfile and the bentofile), under the manifest's. The source tree and
# the test store stand in for the bento: the same code and model, read-only all the same.
IMAGE_ENV = {
    "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
    "HOME": BENTO_HOME.rstrip("/"),
    "LANG": "C.UTF-8",
    "PYTHONUNBUFFERED": "1",
    "BENTOML_HOME": BENTO_HOME,
    "BENTOML_CONTAINERIZED": "true",
    "HF_HUB_OFFLINE": "1",
}
SETUP_FAILED = 97  # the pod's filesystem could not be built here (no overlayfs, no mount namespace)


def pod_env(container: dict, key: str) -> dict[str, str]:
    """The container's variables as the kubelet sets them, for the smallest pod (one CPU)."""
    env = {}
    for entry in container["env"]:
        source = entry.get("valueFrom", {})
        env[entry["name"]] = entry.get("value", key if "secretKeyRef" in source else "1")
    return env


def pod_filesystem(spec: dict, env: dict[str, str], scratch: Path, store: Path, key: str) -> list[str]:
    """Shell lines (run as root in a mount namespace of their own) that build the pod's view under ``scratch``/root:
    this machine's root read-only, the manifest's volumes where it mounts them (emptyDir: a tmpfs of its
    sizeLimit; a Secret: its items with its mode, read-only) and ``store`` as the model store in BentoML's home."""
    container, q = the_container(spec), shlex.quote
    root, layers, group = q(f"{scratch}/root"), q(str(scratch)), spec["securityContext"]["fsGroup"]
    mounts = container.get("volumeMounts", [])
    models = f"{env['BENTOML_HOME'].rstrip('/')}/models"
    lines = [
        f"mount -t tmpfs tmpfs {layers}",
        f"mkdir {layers}/upper {layers}/work {layers}/store-upper {layers}/store-work {root}",
        f"mount -t overlay overlay -o lowerdir=/,upperdir={layers}/upper,workdir={layers}/work {root}",
    ]
    # What the image has (its home), what the container runtime makes (the mount points), and the interpreter
    # and the code readable by the pod's user, as the image's are (a developer's may sit in a 0700 home).
    lines += [f"mkdir -p {root}{q(path)}" for path in [BENTO_HOME, models, *(m["mountPath"] for m in mounts)]]
    lines += [f"chmod o+rx {root}{q(str(d))}" for d in sorted({*Path(sys.executable).resolve().parents, *ROOT.parents, ROOT})]
    lines += [f"mount -o remount,ro {root}", f"mount -t proc proc {root}/proc"]
    lines += [f"mount --rbind /{name} {root}/{name}" for name in ("dev", "sys")]  # /dev/shm stays writable, as in a pod
    for mount in mounts:
        volume, target = volume_at(spec, container, mount["mountPath"])[1], f"{root}{q(mount['mountPath'])}"
        if "emptyDir" in volume:
            lines.append(f"mount -t tmpfs -o size={quantity(volume['emptyDir']['sizeLimit'])},mode=0777 tmpfs {target}")
            continue
        secret = volume["secret"]
        lines.append(f"mount -t tmpfs -o size=1m,mode=0755 tmpfs {target}")
        for item in secret["items"]:
            file = f"{target}/{q(item['path'])}"
            lines += [f"printf '%s\\n' {q(key)} > {file}", f"chown 0:{group} {file}", f"chmod {secret['defaultMode']:o} {file}"]
        lines.append(f"mount -o remount,ro {target}")
    # The model, readable by the pod's user as the bento's files are in the image: an overlay that copies
    # metadata only (metacopy), so the store itself stays as it is.
    lines += [
        f"mkdir -p {root}{q(models)}",  # where BentoML's home is a volume, on it
        f"mount -t overlay overlay -o metacopy=on,lowerdir={q(str(store))},upperdir={layers}/store-upper,workdir={layers}/store-work "
        f"{root}{q(models)}",
        f"chmod -R a+rX {root}{q(models)}",
        f"mount -o remount,ro {root}{q(models)}",
    ]
    return lines


class Pod(NamedTuple):
    url: str
    process: subprocess.Popen
    root: str  # the pod's root, as seen from its mount namespace
    log_path: Path


@contextmanager
def serving_in_the_pod(spec: dict, env: dict[str, str], key: str, tmp_path: Path) -> Iterator[Pod]:
    """``bentoml serve`` of the source tree in the pod's filesystem (``pod_filesystem``), as the pod's user;
    skips where that filesystem cannot be built. A port taken before the server binds it gets two more tries."""
    context, q = spec["securityContext"], shlex.quote
    scratch, log_path = tmp_path / "pod", tmp_path / "serve.log"
    scratch.mkdir()
    setup = pod_filesystem(spec, env, scratch, Path(os.environ["BENTOML_HOME"], "models"), key)
    user = f"--reuid={context['runAsUser']} --regid={context['runAsGroup']} --groups={context['fsGroup']}"
    variables = " ".join(q(f"{name}={value}") for name, value in env.items())
    for attempt in range(3):
        port = free_port()
        serve = f"exec chroot {scratch}/root setpriv {user} --no-new-privs env -i -C {q(str(ROOT))} {variables} "
        serve += f"{q(sys.executable)} -m bentoml serve service:TextBento --host 127.0.0.1 --port {port}"
        script = "\n".join(["(", "set -e", *setup, f") || exit {SETUP_FAILED}", serve])
        with open(log_path, "wb") as log:
            unshared = ["unshare", "--mount", "--propagation", "private", "bash", "-c", script]
            process = subprocess.Popen(unshared, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_ready(f"http://127.0.0.1:{port}", process, timeout_s=180)
            break
        except ServerExited:
            if process.returncode == SETUP_FAILED:
                pytest.skip(f"the pod's filesystem cannot be built here: {log_path.read_text()[-500:]}")
            if "Address already in use" not in log_path.read_text() or attempt == 2:
                raise AssertionError(f"the pod did not become ready:\n{log_path.read_text()[-3000:]}") from None
    try:
        yield Pod(f"http://127.0.0.1:{port}", process, f"{scratch}/root", log_path)
    finally:
        stop_group(process)


@pytest.mark.skipif(
    os.geteuid() != 0 or not all(map(shutil.which, ("unshare", "setpriv", "chroot", "nsenter"))),
    reason="builds the pod's filesystem: root, unshare, setpriv, chroot, nsenter",
)
def test_the_pod_serves_with_a_read_only_root_and_its_volumes(embed_tag, tmp_path):
    """The CPU pod's filesystem, from the manifest: ``bentoml serve`` as the pod's user, on this machine's root
    made read-only, with only the manifest's volumes writable, starts, answers with the Secret's key, and
    keeps its metrics where the manifest gives them room. Nothing tries to write elsewhere and says so."""
    spec, key = pod_spec("cpu"), "pod-filesystem-test-key"
    env = {**IMAGE_ENV, **pod_env(the_container(spec), key), "TEXTBENTO_MODEL": embed_tag}
    texts = ["a read-only root", "and the volumes it writes to"]
    with serving_in_the_pod(spec, env, key, tmp_path) as pod:
        answer = requests.post(f"{pod.url}/v1/embeddings", json={"input": texts}, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        assert answer.status_code == 200 and len(answer.json()["data"]) == len(texts)
        assert requests.post(f"{pod.url}/v1/embeddings", json={"input": texts}, timeout=60).status_code == 401
        assert "textbento_" in requests.get(f"{pod.url}/metrics", timeout=60).text
        metrics_dir = f"{pod.root}{env['BENTOML_HOME']}/prometheus_multiproc_dir"
        listed = subprocess.run(["nsenter", f"--mount=/proc/{pod.process.pid}/ns/mnt", "ls", metrics_dir], capture_output=True, text=True)
        assert any(name.startswith("counter_") for name in listed.stdout.split()), listed
    log = pod.log_path.read_text()
    for refusal in ("Read-only file system", "Permission denied", "telemetry"):
        assert refusal not in log, log[-3000:]
