"""Optional bearer-key authentication (failing closed), JSON-only bodies, the open-by-default warning,
and what a client can learn without a key (nothing) or with one (no path of the server's disk)."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import openai
import pytest
import requests

from serving.settings import NoKeys, Settings
from tests.conftest import running

ROOT = Path(__file__).resolve().parent.parent

KEYS = ("first-key", "second-key")


@pytest.fixture(scope="module")
def auth_url(embed_tag, logs, tmp_path_factory):
    key_file = tmp_path_factory.mktemp("keys") / "keys.txt"
    key_file.write_text(f"{KEYS[1]}\n\n")
    env = {"TEXTBENTO_API_KEYS": KEYS[0], "TEXTBENTO_API_KEYS_FILE": str(key_file), "TEXTBENTO_METRICS_PUBLIC": "false"}
    with running(embed_tag, logs, "auth", **env) as server:
        yield server.url


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "Bearer first-ke", "Basic first-key", "first-key"])
def test_missing_or_wrong_key_gets_401(auth_url, authorization):
    headers = {"authorization": authorization} if authorization else {}
    response = requests.post(f"{auth_url}/v1/embeddings", json={"input": "x"}, headers=headers, timeout=10)
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "unauthorized"
    assert requests.get(f"{auth_url}/v1/models", headers=headers, timeout=10).status_code == 401
    for path in ("/embed", "/embed_sparse", "/predict", "/rerank", "/similarity", "/tokenize", "/"):  # TEI's routes, in TEI's shape
        refused = requests.post(f"{auth_url}{path}", json={"inputs": "x"}, headers=headers, timeout=10)
        assert refused.status_code == 401 and refused.json()["error_type"] == "Validation", (path, refused.text)
    assert requests.get(f"{auth_url}/info", headers=headers, timeout=10).status_code == 401
    for path in ("/docs.json", "/schema.json", "/", f"/zz-{uuid.uuid4()}", "/static_content/index.css"):  # every path but the probes
        assert requests.get(f"{auth_url}{path}", headers=headers, timeout=10).status_code == 401, path


def test_the_openapi_schema_is_served_with_a_key(auth_url):
    answer = requests.get(f"{auth_url}/docs.json", headers={"authorization": f"Bearer {KEYS[0]}"}, timeout=10)
    assert answer.status_code == 200 and "/v1/embeddings" in answer.json()["paths"]


def test_unknown_paths_add_no_metric_series(auth_url):
    """BentoML's request metrics label a path no route answers ``other``: without it, every unknown path
    (no key needed) was a series of its own in every scrape."""
    key = {"authorization": f"Bearer {KEYS[0]}"}

    def series() -> list[str]:
        text = requests.get(f"{auth_url}/metrics", headers=key, timeout=10).text
        return [line for line in text.splitlines() if 'endpoint="' in line and not line.startswith("#")]

    requests.get(f"{auth_url}/zz-warm-up", timeout=10)  # the first one makes the ``other`` series
    assert requests.post(f"{auth_url}/v1/embeddings", json={"input": "x"}, headers=key, timeout=10).status_code == 200
    before = series()
    for _ in range(100):
        assert requests.get(f"{auth_url}/zz-{uuid.uuid4()}", timeout=10).status_code == 401
    after = series()
    assert len(after) == len(before) and not [line for line in after if "zz-" in line]
    labels = {line.partition('endpoint="')[2].partition('"')[0] for line in after}
    assert {"other", "/v1/embeddings", "/encode"} <= labels, labels  # a known route keeps its path, the Encoder's too


@pytest.mark.parametrize("key", KEYS)
def test_keys_from_variable_and_file_are_accepted(auth_url, key):
    response = requests.post(f"{auth_url}/v1/embeddings", json={"input": "x"}, headers={"authorization": f"Bearer {key}"}, timeout=10)
    assert response.status_code == 200


def test_probes_stay_open_and_metrics_is_protected_by_setting(auth_url):
    assert requests.get(f"{auth_url}/livez", timeout=5).status_code == 200
    assert requests.get(f"{auth_url}/readyz", timeout=5).status_code == 200
    assert requests.get(f"{auth_url}/metrics", timeout=5).status_code == 401
    assert requests.get(f"{auth_url}/metrics", headers={"authorization": f"Bearer {KEYS[0]}"}, timeout=5).status_code == 200


def test_openai_client_sends_its_key(auth_url):
    client = openai.OpenAI(base_url=f"{auth_url}/v1", api_key=KEYS[1], max_retries=0)
    assert len(client.embeddings.create(model="minilm", input="x").data[0].embedding) == 384
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{auth_url}/v1", api_key="nope", max_retries=0).embeddings.create(model="minilm", input="x")


def test_open_server_warns_at_start_up(embed_server):
    assert "no API key configured" in embed_server.log.read_text()
    assert requests.get(f"{embed_server.url}/metrics", timeout=5).status_code == 200


def test_a_model_imported_from_a_directory_shows_its_name_not_its_path(classify_url, classifier_dir):
    (card,) = requests.get(f"{classify_url}/v1/models", timeout=10).json()["data"]
    info = requests.get(f"{classify_url}/info", timeout=10).json()
    assert card["source"] == info["model_id"] == classifier_dir.name
    # The path it was imported from still names it in a request.
    answer = requests.post(f"{classify_url}/v1/classify", json={"inputs": ["fine"], "model": str(classifier_dir)}, timeout=30)
    assert answer.status_code == 200


def test_shown_sources_keep_hub_ids_and_drop_local_paths():
    from api.catalog import shown_source

    assert shown_source("sentence-transformers/all-MiniLM-L6-v2") == "sentence-transformers/all-MiniLM-L6-v2"
    assert shown_source("minilm") == "minilm"
    assert shown_source("/srv/models/my model/") == "my model"
    assert shown_source("./models/team/mini") == "mini"
    assert shown_source("models/team/mini") == "mini"  # a Hub id has one slash at most
    assert shown_source("/home/me/base, fine-tuned on data.csv") == "base, fine-tuned on data.csv"
    assert shown_source("BAAI/bge-small-en-v1.5, fine-tuned on data.csv") == "BAAI/bge-small-en-v1.5, fine-tuned on data.csv"


def test_keys_from_the_variable_and_the_file(tmp_path):
    key_file = tmp_path / "keys.txt"
    key_file.write_text("\n  third  \n\nfourth\n")
    assert Settings(api_keys="", api_keys_file="").keys() == []
    assert Settings(api_keys=" first , second,", api_keys_file=str(key_file)).keys() == ["first", "second", "third", "fourth"]


@pytest.mark.parametrize("contents", [None, "", "\n  \n\t\n"])
def test_a_keys_file_missing_or_without_a_key_refuses_to_start(tmp_path, contents):
    """An operator who named a keys file meant the API closed: a Secret not mounted or empty is no open server."""
    key_file = tmp_path / "keys.txt"
    if contents is not None:
        key_file.write_text(contents)
    with pytest.raises(NoKeys, match="TEXTBENTO_API_KEYS_FILE"):
        Settings(api_keys="a-key", api_keys_file=str(key_file))


@pytest.mark.parametrize("value", [" , ", ",", " "])
def test_a_keys_variable_without_a_key_refuses_to_start(value):
    with pytest.raises(NoKeys, match="TEXTBENTO_API_KEYS is set"):
        Settings(api_keys=value)


def test_the_server_refuses_to_start_on_keys_that_hold_no_key(tmp_path):
    empty = tmp_path / "keys.txt"
    empty.write_text("\n")
    env = {**os.environ, "BENTOML_HOME": str(tmp_path / "home"), "TEXTBENTO_API_KEYS": "", "TEXTBENTO_API_KEYS_FILE": str(empty)}
    serve = [sys.executable, "-m", "bentoml", "serve", "service:TextBento", "--host", "127.0.0.1", "--port", "0"]
    result = subprocess.run(serve, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert f"TEXTBENTO_API_KEYS_FILE={empty} holds no key" in result.stderr
