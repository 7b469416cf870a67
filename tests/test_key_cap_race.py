"""The key cap holds under concurrent creates (review 22 M3): the count of active keys and the key's write were two
transactions, so 8 creates at once on an org one short of a cap of 3 left 9, 3 and 5 active keys. The org's key
tally is now written with each key expecting the version read before the count: a create that counted alike with
another is stale, counts again, and is refused."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from grandbo.config import Settings
from grandbo.errors import KeyLimitError
from grandbo.service import Grandbo

CAP = 3


def _race(grandbo: Grandbo, n: int, go: threading.Barrier | None = None) -> tuple[int, int]:
    """`n` threads create a key each on acme at once: how many were made and how many refused."""
    go = go or threading.Barrier(n)
    made, refused = [], []

    def create() -> None:
        memory = grandbo.org("acme")
        go.wait()
        try:
            made.append(memory.keys.create("admin"))
        except KeyLimitError:
            refused.append(1)

    threads = [threading.Thread(target=create) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(made), len(refused)


def test_concurrent_creates_never_pass_the_key_cap(settings):
    capped = settings.model_copy(update={"keys_per_org": CAP})
    with Grandbo.init(capped, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.keys.create("read")
        memory.keys.create("read")
        for _ in range(3):
            made, refused = _race(grandbo, 8)
            assert memory.keys.active_count(100) == CAP
            assert made + refused == 8 and made <= 1
            memory.keys.revoke(next(key.id for key in memory.keys.all() if key.active))
        assert memory.keys.active_count(100) == CAP - 1


SCRIPT = """
import sys, threading, time
from pathlib import Path
from grandbo.config import Settings
from grandbo.service import Grandbo
from tests.test_key_cap_race import _race

go = Path(sys.argv[2])
with Grandbo.open(Settings(home=sys.argv[1], keys_per_org=3)) as grandbo:
    grandbo.org("acme").keys.active_count(100)  # opened and read: ready
    Path(sys.argv[3]).touch()
    while not go.exists():
        time.sleep(0.005)
    print(*_race(grandbo, 4))
"""


def test_creates_from_two_processes_never_pass_the_key_cap(tmp_path):
    settings_home = tmp_path / "home"
    settings = Settings(home=settings_home, keys_per_org=CAP)
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.keys.create("read")
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{n}" for n in range(2)]
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(settings_home), str(go), str(flag)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent.parent,
        )
        for flag in ready
    ]
    while not all(flag.exists() for flag in ready) and all(run.poll() is None for run in runs):
        time.sleep(0.01)
    go.touch()
    outs = [run.communicate(timeout=120)[0].split() for run in runs]
    assert all(run.returncode == 0 for run in runs), outs
    assert sum(int(out[0]) for out in outs) == CAP - 1
    with Grandbo.open(settings) as grandbo:
        assert grandbo.org("acme").keys.active_count(100) == CAP
