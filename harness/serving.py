"""Starts the real ``bentoml serve`` (every process) on a free 127.0.0.1 port and stops it cleanly."""

from __future__ import annotations

import contextlib
import http.client
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
# `python -m bentoml`, not the console script beside the interpreter: where BentoML is installed with
# `pip --target` (the GPU machine, bench/gpu.sh) there is none beside it.
BENTOML = [sys.executable, "-m", "bentoml"]


class Server(NamedTuple):
    """A running server: its base URL and its process (the leader of its process group)."""

    url: str
    process: subprocess.Popen

    def rss_mib(self) -> float:
        """Resident memory of the server's whole process tree."""
        import psutil

        root = psutil.Process(self.process.pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20


def role(command_line: str) -> str:
    """Which part of a ``bentoml serve`` process tree a process is, from its command line."""
    if "--service-name encoder" in command_line:
        return "Encoder"
    return "API worker" if "_bentoml_impl.worker.service" in command_line else "supervisor"


def service_processes(process: subprocess.Popen, service: str) -> list:
    """The live processes (psutil) of one BentoML service (``--service-name``) of the server led by ``process``."""
    import psutil

    found = []
    for child in psutil.Process(process.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):  # exited, or a zombie not yet reaped
            # The trailing space: "encoder" names a lone model's Encoder and begins every other Encoder's name.
            if f"--service-name {service} " in " ".join(child.cmdline()) + " ":
                found.append(child)
    return found


class ServerExited(RuntimeError):
    """The server process ended before it was ready."""


PORT_SPAN = 12_000  # how far below the ephemeral range a server's port is drawn from


def free_port() -> int:
    """A free 127.0.0.1 port below the kernel's ephemeral range.

    BentoML's arbiter binds port 0 for its ZeroMQ endpoints and the Encoders' ports, so they are
    drawn from the ephemeral range: a port chosen there and released could be taken by one of them
    before the server binds it (a probe then reads a ZeroMQ greeting, not HTTP).
    """
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    for _ in range(100):
        port = random.randrange(max(1024, ephemeral_low - PORT_SPAN), ephemeral_low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port below {ephemeral_low} after 100 tries")


def wait_ready(base_url: str, process: subprocess.Popen, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerExited(f"bentoml serve exited with status {process.returncode}")
        try:
            # A probe given up stays "in progress" in BentoML's gauge for as long as the server takes it: wait it out.
            with urllib.request.urlopen(f"{base_url}/readyz", timeout=30) as response:
                if response.status == 200:
                    return
        except (OSError, http.client.HTTPException):  # not up yet, or the port is not ours (the retry below)
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{base_url} not ready after {timeout_s} s")


def private_home(store_home: str) -> str:
    """A BENTOML_HOME of its own that shares ``store_home``'s model store.

    ``bentoml serve`` empties ``$BENTOML_HOME/prometheus_multiproc_dir`` at start-up, so a second
    server on the same home silently blanks the first one's /metrics.
    """
    home = tempfile.mkdtemp(prefix="textbento-serve-home-")
    Path(store_home, "models").mkdir(parents=True, exist_ok=True)
    os.symlink(Path(store_home, "models").resolve(), Path(home, "models"))
    return home


def stop_group(process: subprocess.Popen, grace_s: float = 30) -> None:
    """SIGTERM to the process group a server was started in (``start_new_session``), SIGKILL after ``grace_s``."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


STOPPING: list[threading.Thread] = []  # servers stopping in the background (``serve(stop_in_background=True)``)


def wait_for_stops() -> None:
    """Waits until every server stopping in the background has exited and its files are removed."""
    while STOPPING:
        STOPPING.pop().join()


@contextmanager
def serve(
    target: str = "service:TextBento",
    *,
    env: dict[str, str] | None = None,
    log_path: Path | None = None,
    uvicorn_factory: bool = False,
    cwd: Path = ROOT,
    stop_in_background: bool = False,
) -> Iterator[Server]:
    """Yields a ready ``bentoml serve`` of ``target`` (or uvicorn with an app factory), run in ``cwd``; stopped on exit.

    ``stop_in_background``: the exit sends the stop and returns, and ``wait_for_stops`` waits for it. A stop
    takes about 2 s, mostly the Encoder's quiet second (``serving/drain.py``) and the arbiter's polling,
    little of it CPU: a test suite's next server starts meanwhile."""
    store_home = os.environ.get("BENTOML_HOME", str(Path.home() / "bentoml"))
    home = private_home(store_home)
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115 - closed in the finally below
    command = (
        [sys.executable, "-m", "uvicorn", "--factory", target, "--no-access-log", "--log-level", "warning"]
        if uvicorn_factory
        else [*BENTOML, "serve", target]
    )
    process = None
    try:
        # A port chosen free can still be taken before the server binds it ("Address already in use"):
        # a server that exits while starting gets two more tries on fresh ports; one that fails three
        # times fails the caller.
        for attempt in range(3):
            port = free_port()
            process = subprocess.Popen(
                [*command, "--host", "127.0.0.1", "--port", str(port)],
                cwd=cwd,
                env={**os.environ, "HF_HUB_OFFLINE": "1", "BENTOML_HOME": home, **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            base_url = f"http://127.0.0.1:{port}"
            try:
                wait_ready(base_url, process)
                break
            except ServerExited:
                if attempt == 2:
                    raise
        yield Server(base_url, process)
    finally:

        def stop() -> None:
            if process is not None:
                stop_group(process)
            if log_path:
                log.close()
            shutil.rmtree(home, ignore_errors=True)

        if stop_in_background:
            STOPPING.append(threading.Thread(target=stop, name=f"stop {target}"))
            STOPPING[-1].start()
        else:
            stop()


def cpu_seconds(pid: int) -> dict[str, float]:
    """CPU time (user + system) used so far by each part of the server whose process group leader is ``pid``.

    An Encoder's is split in two: its event loop (the main thread: HTTP, BentoML's batcher, serde, and a
    lone pass when it runs there) and its other threads (the forward passes: the inference thread and
    ONNX Runtime's), so that the way to the model and the model show apart."""
    import psutil

    used: dict[str, float] = {}
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            command = " ".join(process.cmdline())
            times, part = process.cpu_times(), role(command) if "bentoml" in command else "server"
            spent = {part: times.user + times.system}
            if part == "Encoder":
                main = next((t.user_time + t.system_time for t in process.threads() if t.id == process.pid), 0.0)
                spent = {"Encoder: event loop": main, "Encoder: model threads": spent[part] - main}
            for name, seconds in spent.items():
                used[name] = used.get(name, 0.0) + seconds
    return used


def machine_times() -> dict[str, float]:
    """The whole machine's CPU seconds so far, all cores: idle (iowait included), stolen by the hypervisor
    (a VM's cores given to others), and the wall clock times the core count, the span they share."""
    import psutil

    times = psutil.cpu_times()
    return {
        "idle": times.idle + getattr(times, "iowait", 0.0),
        "steal": getattr(times, "steal", 0.0),
        "cores": time.monotonic() * (psutil.cpu_count() or 1),
    }


MACHINE_SHARES = {"machine_idle_share": "idle", "machine_steal_share": "steal"}  # a figure's name: its ``machine_times`` part


def machine_shares(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The shares of all cores' time between two ``machine_times`` that stood idle and that the hypervisor took."""
    span = max(after["cores"] - before["cores"], 1e-9)
    return {name: round((after[part] - before[part]) / span, 4) for name, part in MACHINE_SHARES.items()}


def cpu_ms_per(before: dict[str, float], after: dict[str, float], count: int) -> dict[str, float]:
    """Milliseconds of CPU per request (or per ``count`` of anything) of each part, between two ``cpu_seconds``."""
    return {part: round((after[part] - before.get(part, 0.0)) * 1000 / max(count, 1), 3) for part in after}
