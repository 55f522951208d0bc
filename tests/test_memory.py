"""Large buffers go back to the system once freed, in a process that asked for it (``models/memory.py``)."""

import subprocess
import sys

import pytest

# In a fresh process: a large block freed, then one a little smaller; the MiB of RSS the second leaves behind.
SCENARIO = """
import sys, psutil
from models.memory import return_large_buffers
if sys.argv[1] == "returned":
    assert return_large_buffers()
rss = lambda: psutil.Process().memory_info().rss
first = bytearray(24_000_000)
del first  # stock glibc: mapped, unmapped, and the mmap threshold raised to 24 MB
start = rss()
second = bytearray(16_000_000)
del second  # stock glibc: under the raised threshold, so from the heap, which keeps it
print((rss() - start) / 2**20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_freed_large_buffer_leaves_the_process():
    def left_behind(how: str) -> float:
        run = subprocess.run([sys.executable, "-c", SCENARIO, how], capture_output=True, text=True, check=True)
        return float(run.stdout)

    assert left_behind("stock") > 10  # what an API worker held after large answers
    assert left_behind("returned") < 2
