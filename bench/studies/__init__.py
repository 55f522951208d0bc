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


def each_shape(prefix: str, shapes: list[str], measure) -> tuple[dict, list[float]]:
    """``measure(shape, root)`` of each model shape, built under ``root`` into a temporary BentoML store
    (removed after; set before bentoml is first imported, so call this first), printed as it comes;
    and the load average before and after (the machine is shared with other work)."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    home = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["BENTOML_HOME"] = str(home / "bentoml")
    load_before = os.getloadavg()[0]
    measured = {}
    try:
        for shape in shapes:
            measured[shape] = measure(shape, home)
            print(shape, measured[shape], flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return measured, [round(load_before, 2), round(os.getloadavg()[0], 2)]
