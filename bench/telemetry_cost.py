"""What the metrics, timing records and spans cost: the same tree served with ``TEXTBENTO_METRICS`` on
and off, side by side, at the point where per-request costs weigh most (1 text per request, c=64).

    python -m bench.telemetry_cost [--rounds 5] [--seconds 8]    # → bench/results/telemetry-cost.json

Both servers run at once and are loaded in turns, round after round, so that the machine's drift
falls on both alike; the overhead is 1 - on / off of the medians over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from contextlib import ExitStack

from harness.load import closed_loop
from harness.results import write_result
from harness.serving import serve
from harness.texts import short_texts

CONCURRENCY = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--model", default="bench-minilm:latest")
    args = parser.parse_args()
    texts = short_texts(2048)
    body = lambda i: {"input": texts[i % len(texts)]}
    rounds: dict[str, list[dict]] = {"on": [], "off": []}
    with ExitStack() as stack:
        servers = {
            setting: stack.enter_context(serve(env={"TEXTBENTO_MODEL": args.model, "TEXTBENTO_METRICS": str(setting == "on").lower()}))
            for setting in rounds
        }
        for url in (server.url + "/v1/embeddings" for server in servers.values()):  # warm-up
            asyncio.run(closed_loop(url, body, concurrency=CONCURRENCY, requests=4 * CONCURRENCY, deadline_s=10))
        for index in range(args.rounds):
            for setting, server in servers.items():
                result = asyncio.run(
                    closed_loop(server.url + "/v1/embeddings", body, concurrency=CONCURRENCY, requests=10**6, deadline_s=args.seconds)
                )
                rounds[setting].append(result.summary())
                print(
                    f"[round {index + 1}/{args.rounds}] metrics {setting}: {result.summary()['texts_per_s']} texts/s, "
                    f"{result.summary()['errors']} errors",
                    flush=True,
                )
    median = {setting: statistics.median(row["texts_per_s"] for row in rows) for setting, rows in rounds.items()}
    report = {
        "command": "python -m bench.telemetry_cost",
        "point": f"1 text/request, c={CONCURRENCY}",
        "median_texts_per_s": median,
        "overhead": round(1 - median["on"] / median["off"], 4),
        "rounds": rounds,
    }
    write_result("telemetry-cost.json", report, indent=1)
    print(f"metrics on {median['on']:.0f} vs off {median['off']:.0f} texts/s: overhead {report['overhead']:.1%}")


if __name__ == "__main__":
    main()
