"""Studies: each module is a one-off measurement behind a decision in docs/design.md (or docs/reliability.md),
run by hand (``python -m bench.studies.<name>``), not by any make target; its result file is in bench/results/.
They use the harness in ``bench`` (serving, load, texts, testmodels); nothing outside this package imports them."""
