"""The test harness itself: what every server-starting test relies on."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from harness.results import source, write_result
from harness.serving import cpu_seconds, free_port, machine_shares, machine_times


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


BUSY_THREAD = """
import threading, time
def spin():
    end = time.thread_time() + 0.5
    while time.thread_time() < end:
        pass
threading.Thread(target=spin).start()
print("started", flush=True)
time.sleep(60)
"""


def test_an_encoders_cpu_is_split_into_its_event_loop_and_its_model_threads():
    """bench.compare and bench.peers report the Encoder's CPU per request in two parts: a thread that
    computes counts as the model's, the main thread as the event loop's (0.5 s spun, counted in ticks of 10 ms)."""
    process = subprocess.Popen(
        [sys.executable, "-c", BUSY_THREAD, "bentoml", "--service-name", "encoder"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout.readline() == "started\n"
        deadline = time.monotonic() + 30
        while (used := cpu_seconds(process.pid))["Encoder: model threads"] < 0.4 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert set(used) == {"Encoder: event loop", "Encoder: model threads"}
        assert used["Encoder: model threads"] >= 0.4 > 0.2 > used["Encoder: event loop"], used
    finally:
        process.kill()
        process.wait()


def test_the_machines_idle_and_stolen_shares_are_of_all_cores_time():
    """Beside the server's CPU per request, bench.compare and bench.peers record how much of the machine stood
    idle and how much the hypervisor took: one core busy for a while leaves at most the other cores idle."""
    assert machine_shares({"idle": 10, "steal": 1, "cores": 100}, {"idle": 40, "steal": 3, "cores": 200}) == {
        "machine_idle_share": 0.3,
        "machine_steal_share": 0.02,
    }
    before = machine_times()
    ends = time.process_time() + 0.5
    while time.process_time() < ends:
        pass
    shares = machine_shares(before, machine_times())
    cores = os.cpu_count()
    assert 0 <= shares["machine_idle_share"] <= (cores - 0.5) / cores + 0.05, shares
    assert 0 <= shares["machine_steal_share"] < 0.5, shares
