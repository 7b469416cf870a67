"""The readers by name: `csv` and `jsonl` (`sources.tabular`), and every vendor's module of `sources/` that exists
(`sources/<name>.py` with a module-level `READER`). An unknown name is an error that lists the valid ones, and a
`--map` the reader would refuse is one before anything is read (`chosen`)."""

from __future__ import annotations

import importlib

from grandbo.errors import InvalidInputError
from grandbo.history.record import Reader
from grandbo.history.sources.csv_table import CSV
from grandbo.history.sources.tabular import JSONL, parse_pairs

VENDORS = ("pagerduty", "opsgenie", "jira", "incidentio", "rootly", "markdown")


def readers() -> dict[str, Reader]:
    """Every reader there is, by name (a vendor's module not present is simply not listed)."""
    found: dict[str, Reader] = {"csv": CSV, "jsonl": JSONL}
    for name in VENDORS:
        try:
            module = importlib.import_module(f"grandbo.history.sources.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"grandbo.history.sources.{name}":
                raise  # the reader is there but something it needs is not: say so, do not hide it
            continue
        reader = getattr(module, "READER", None)
        if reader is not None:
            found[name] = reader
    return found


def reader(name: str) -> Reader:
    """The reader called `name`, or an InvalidInputError listing the readers there are."""
    known = readers()
    if name not in known:
        raise InvalidInputError(
            f"No history source {name!r}; the sources are {', '.join(sorted(known))}.",
            detail={"source": name, "sources": sorted(known)},
        )
    return known[name]


def chosen(source: str, mapping: str | None) -> tuple[Reader, dict[str, str] | None]:
    """The reader called `source` and `--map`'s pairs (`?map=` over REST), both checked (`Reader.check`) before the
    CLI opens the store or the REST route takes its upload: checked by `read` alone, a bad mapping was refused only
    after a 1 GiB upload, or after the CLI had taken its org's import lease."""
    found, pairs = reader(source), parse_pairs(mapping)
    found.check(pairs)
    return found, pairs
