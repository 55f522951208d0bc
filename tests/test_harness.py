"""The test harness itself: what every server-starting test relies on."""

import socket
from pathlib import Path

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
