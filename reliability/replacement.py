"""How long a model's requests wait when its Encoder dies: the Encoder killed, its replacement timed.

    python -m reliability.replacement [--kills 3] [--tree PATH] [--model TAG] [--out replacement.json]

Serves the model (from ``--tree``: another work tree's code, for a side-by-side) and, ``--kills`` times,
sends SIGKILL to its Encoder once a request has been answered, then records how long until the
replacement process exists and until a one-text request is answered again. No load runs meanwhile,
so what is timed is the supervisor and the Encoder's start, not a queue.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time
from pathlib import Path

import requests

from harness.results import write_result
from harness.serving import serve, service_processes

ANSWERED_WITHIN_S = 120


def answered(url: str) -> bool:
    try:
        return requests.post(f"{url}/v1/embeddings", json={"input": "one text"}, timeout=ANSWERED_WITHIN_S).status_code == 200
    except requests.RequestException:
        return False


def kill_once(server) -> dict:
    """The Encoder killed: seconds until its replacement process started and until a request is answered again."""
    (encoder,) = service_processes(server.process, "encoder")
    killed = time.time()
    encoder.send_signal(signal.SIGKILL)
    while not (replacement := [p for p in service_processes(server.process, "encoder") if p.pid != encoder.pid]):
        if time.time() - killed > ANSWERED_WITHIN_S:
            raise TimeoutError(f"no Encoder replaced pid {encoder.pid} within {ANSWERED_WITHIN_S} s")
        time.sleep(0.02)
    while not answered(server.url):
        if time.time() - killed > ANSWERED_WITHIN_S:
            raise TimeoutError(f"no request answered within {ANSWERED_WITHIN_S} s of the kill")
        time.sleep(0.05)
    started_s = max(replacement[0].create_time() - killed, 0.0)  # create_time has a 10-ms tick
    return {"replacement_started_s": round(started_s, 2), "answered_again_s": round(time.time() - killed, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent, help="the work tree whose code is served")
    parser.add_argument("--model", default="text-model:latest")
    parser.add_argument("--out", default="replacement.json")
    args = parser.parse_args(argv)
    kills = []
    with serve(env={"TEXTBENTO_MODEL": args.model}, cwd=args.tree) as server:
        for index in range(args.kills):
            assert answered(server.url), "the server did not answer before a kill"
            kills.append(kill_once(server))
            print(f"kill {index + 1}: {kills[-1]}", flush=True)
    summary = {
        "command": " ".join(["python -m reliability.replacement", *(argv if argv is not None else sys.argv[1:])]),
        "tree": str(args.tree),
        "kills": kills,
        **{f"median_{key}": statistics.median(kill[key] for kill in kills) for key in ("replacement_started_s", "answered_again_s")},
    }
    print(write_result(args.out, summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
