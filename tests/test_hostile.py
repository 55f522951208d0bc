"""``make hostile``'s parts that need no server: the text fields it finds in an OpenAPI, the requests it
spells, and what it counts as not back to the start (the battery itself runs minutes: ``make hostile``)."""

from reliability.hostile import PHASES, PeakRSS, breaches, raw_request, route_variants, spellings, status_of

SCHEMAS = {
    "Pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "string"}], "minItems": 2, "maxItems": 2},
    "Inputs": {
        "type": "object",
        "properties": {"source": {"type": "string"}, "others": {"type": "array", "items": {"type": "string"}}},
        "required": ["source", "others"],
    },
    "Request": {
        "type": "object",
        "properties": {
            "input": {
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"anyOf": [{"type": "string"}, {"$ref": "#/components/schemas/Pair"}]}},
                ]
            },
            "model": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "nested": {"$ref": "#/components/schemas/Inputs"},
            "format": {"type": "string", "enum": ["float", "base64"]},
            "top_k": {"type": "integer", "minimum": 3},
            "normalize": {"type": "boolean"},
        },
        "required": ["input", "nested", "top_k"],
    },
}
OPENAPI = {
    "paths": {
        "/metrics": {"get": {}},
        "/v1/thing": {"post": {"requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Request"}}}}}},
        "/v1/list": {"get": {}},
    },
    "components": {"schemas": SCHEMAS},
}
LEAST = {"input": "x", "nested": {"source": "x", "others": ["x"]}, "top_k": 3}


def test_every_text_field_is_found_and_carries_the_text_with_the_rest_of_the_body_valid():
    found = {field: body for path, field, body in route_variants(OPENAPI, "T") if path == "/v1/thing"}
    assert found == {
        "input": {**LEAST, "input": "T"},
        "input[]": {**LEAST, "input": ["T"]},
        "input[][0]": {**LEAST, "input": [["T", "x"]]},
        "input[][1]": {**LEAST, "input": [["x", "T"]]},
        "model": {**LEAST, "model": "T"},
        "nested.source": {**LEAST, "nested": {"source": "T", "others": ["x"]}},
        "nested.others[]": {**LEAST, "nested": {"source": "x", "others": ["T"]}},
        "format": {**LEAST, "format": "T"},
    }
    many = dict((field, body) for _, field, body in route_variants(OPENAPI, "a", count=1000))
    assert many["input[]"]["input"] == ["a"] * 1000 and many["nested.others[]"]["nested"]["others"] == ["a"] * 1000


def test_requests_are_spelled_as_sent_and_answers_read_by_their_status_line():
    request = raw_request("POST", "/v1/thing", [("Authorization", "Bearer k")], b'{"input": "x"}')
    assert request.startswith(b"POST /v1/thing HTTP/1.1\r\n") and b"\r\nContent-Length: 14\r\n\r\n{" in request
    assert (status_of(b"HTTP/1.1 408 Request Timeout\r\n\r\n"), status_of(b""), status_of(b"SSH-2.0")) == ("408", "closed", "garbled")
    assert "/v1/%74hing" in spellings("/v1/thing") and "/V1/THING" in spellings("/v1/thing")


def test_a_phase_breaches_on_what_grew_past_its_tolerance_not_on_noise():
    each = {"supervisor 1": 100.0, "API worker 2": 300.0, "Encoder 3": 600.0}
    start = {
        "metrics_bytes": 100_000,
        "in_progress": 0.0,
        "rss_mib": 1000.0,
        "rss_mib_by_process": each,
        "open_files": 100,
        "processes": [1, 2, 3],
    }
    assert breaches(start, {**start, "metrics_bytes": 110_000, "rss_mib": 1090.0, "open_files": 104}) == []
    grown = {"metrics_bytes": 30_000_000, "in_progress": 3.0, "rss_mib": 7000.0, "open_files": 1300, "processes": [1, 2, 4]}
    found = breaches(start, {**grown, "rss_mib_by_process": {**each, "API worker 2": 6300.0}})
    assert len(found) == 5
    assert "'API worker 2': 6000.0" in next(breach for breach in found if breach.startswith("RSS")), found  # which one grew
    assert list(PHASES)[0] == "unknown_paths" and "no_key_methods" in PHASES


def test_a_block_shorter_than_the_sampling_interval_still_has_its_peak():
    """The /tokenize flood can end within 0.5 s: its peak read 0.0 MiB, a bound that could not fail."""

    class Growing:
        readings = iter(range(100, 10_000, 100))

        def rss_mib(self) -> float:
            return next(self.readings)

    with PeakRSS(Growing()) as peak:
        pass
    assert peak.peak >= 200  # read as the block starts and again as it ends
