"""Run at the start of every process of a server that ``python -m bench.timeline`` serves (this folder comes first
on its PYTHONPATH): where ``TEXTBENTO_STAMPS`` names a folder, each process stamps there the wall clock at each
stage a request passes (``bench/timeline.py``). Nothing happens otherwise."""

import os
import sys

if os.environ.get("TEXTBENTO_STAMPS"):
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository
    from bench.timeline import install

    install(os.environ["TEXTBENTO_STAMPS"])
