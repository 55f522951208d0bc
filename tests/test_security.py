"""Optional bearer-key authentication, JSON-only bodies, and the open-by-default warning."""

import openai
import pytest
import requests

from tests.conftest import running

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
