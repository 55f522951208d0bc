"""The reliability batteries, each a make target that exits 1 on failure: ``storm`` (clients that give up at
any moment), ``chaos`` (processes SIGKILLed under load), ``hostile`` (clients no server should trust), ``soak``
(mixed traffic for a while) and ``locust_runs`` (the shipped locustfile against fresh servers); ``report`` is
their section of docs/performance.md. Their parts that need no server are unit-tested in ``tests/``; their
result files are in ``bench/results/``.

Its rule: like ``harness``, it drives the service from outside (a process, HTTP, the model store); it imports
nothing from ``api`` or ``service``, and nothing of the product imports it. It ships in no bento.
"""
