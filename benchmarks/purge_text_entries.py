"""What an erasure of a text (`purge-text`) costs in an organization of N generated memories, on the embedded store
or on Postgres (GRANDBO_DATABASE_URL): a text found nowhere, and a text two entries hold, in this tree and in the
tree of `--before` (a src directory, e.g. main's exported with `git archive`), alternated round by round, each round
a fresh process on a fresh store (Postgres: a fresh org in the database named).

    git archive main src | tar -x -C /tmp/main-tree
    PYTHONPATH=src python benchmarks/purge_text_entries.py --before /tmp/main-tree/src [--entries 20000] [--rounds 2]

One JSON line per tree and round: each erasure's time and its process's CPU time, the org's index kept (as a
server keeps it).
"""

from __future__ import annotations

import random
import tempfile
import time
import uuid
from pathlib import Path

from ab import command_line


def measure(entries: int) -> dict[str, float]:
    """One round in this process (the tree on its path)."""
    from grandbo.config import Settings
    from grandbo.eval.bench import seeded_org
    from grandbo.service import Grandbo

    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home))
        init = Grandbo.open if settings.database_url else Grandbo.init
        kwargs = {} if settings.database_url else {"embedding": "deterministic"}
        with init(settings, **kwargs) as grandbo:
            org = f"bench-{uuid.uuid4().hex[:8]}"
            memory = seeded_org(grandbo, random.Random(3), entries, org)
            for n in range(2):
                memory.remember({"title": f"token pasted {n}", "body": "the key hunter2-walrus-9931 leaked"})
            memory.recall("redis replica lag after a failover on the checkout service")  # its index kept, as a server's
            figures: dict[str, float] = {}
            for name, text in (("nowhere", "a text no entry holds"), ("two", "hunter2-walrus-9931")):
                started, cpu = time.perf_counter(), time.process_time()
                memory.erasure.purge_text(text, reason="bench", actor="bench")
                figures[f"{name}_s"] = round(time.perf_counter() - started, 3)
                figures[f"{name}_cpu_s"] = round(time.process_time() - cpu, 3)
            if settings.database_url:
                grandbo.drop_org(org)
    return figures


def main() -> None:
    command_line(__file__, __doc__ or "", measure, "entries", 20_000)


if __name__ == "__main__":
    main()
