"""Studies: each module is a one-off measurement behind a decision in docs/design.md (or docs/reliability.md),
run by hand (``python -m bench.studies.<name>``), not by any make target; its result file is in bench/results/.
They use the harness in ``bench`` (serving, load, texts, testmodels); nothing outside this package imports them."""


def alternated_rates(backends: dict, ids: list, pad_id: int, token_budget: int, rounds: int, batch: int = 32) -> dict:
    """Texts/s of each backend (by name) over ``ids`` in runs of ``batch``, best of ``rounds`` that take the
    backends in turn, so that a noisy neighbour on the machine slows each of them, not one."""
    import time

    from models.inference import run_batch

    best = dict.fromkeys(backends, 0.0)
    for _ in range(rounds):
        for name, backend in backends.items():
            started = time.perf_counter()
            for start in range(0, len(ids), batch):
                run_batch(backend, ids[start : start + batch], pad_id, token_budget)
            best[name] = max(best[name], len(ids) / (time.perf_counter() - started))
    return best
