"""The test harness itself: what every server-starting test relies on."""

import json
import socket
from pathlib import Path

from harness.results import source, write_result
from harness.serving import free_port


def test_a_chosen_port_lies_outside_the_range_bentoml_binds_port_0_from():
    """BentoML's arbiter takes its ZeroMQ and Encoder ports by binding port 0, from the kernel's
    ephemeral range: a port chosen there could be taken before the server binds it."""
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = {free_port() for _ in range(20)}
    assert all(1024 <= port < low for port in ports), ports
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        assert low <= sock.getsockname()[1] <= high
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free, as promised


def test_a_result_file_records_the_machine_day_and_commit_it_was_measured_on(tmp_path):
    written = json.loads(write_result(tmp_path / "figure.json", {"texts_per_s": 1.0}).read_text())
    assert written["texts_per_s"] == 1.0 and written["cpu"]["model"] and len(written["date"]) == 10
    assert "commit" in written
    line = source("figure.json", written)
    assert written["cpu"]["model"] in line and written["date"] in line
    assert source("old.json", {}) == "`bench/results/old.json`: CPU not recorded; date not recorded."
