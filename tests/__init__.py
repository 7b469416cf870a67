"""The test suite. Imported before `conftest.py` and every test module: the suite keeps its bytecode.

With PYTHONDONTWRITEBYTECODE set (as some shells and agents set it), every run compiled the package and rewrote
the asserts of all ~230 test modules again in each xdist worker (17 s of CPU a worker to collect, against 12 s
with them kept) and every `python -m grandbo` a test starts compiled the package again (0.3-0.5 s each). The
bytecode goes to the `__pycache__` folders git ignores, and does not change what any test runs."""

import os
import sys

sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the processes the tests start keep theirs too
