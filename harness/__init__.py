"""The test and benchmark harness: a real ``bentoml serve`` on a free port, stopped cleanly
(``serving``), the closed-loop load generator (``load``), the load's texts (``texts``), and
random-weight models built offline (``testmodels``). ``tests/`` and ``bench/`` both use it; it
ships in no bento.

Its rule: it drives the service from outside, as a user would (a process, HTTP, the model store);
it imports nothing from ``api``, ``serving`` or ``service``.
"""
