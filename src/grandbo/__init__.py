"""Grandbo: institutional memory for AI agents and on-call teams.

The public names are imported when first used (PEP 562), not with the package: every `import grandbo.X`, and so
every `grandbo` command, runs this module first, and importing the engine here cost each of them about 1 s of CPU
(`grandbo --help` included)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import structlog

from grandbo.logs import configure as configure_logs

if TYPE_CHECKING:
    from grandbo.config import Settings
    from grandbo.errors import GrandboError
    from grandbo.memory import OrgMemory
    from grandbo.model import (
        Arm,
        CorpusStats,
        EmbeddingSpace,
        Entry,
        Event,
        Explanation,
        Hit,
        Kind,
        NewEntry,
        RecallResult,
        Severity,
        Source,
        Status,
    )
    from grandbo.service import Grandbo
    from grandbo.triage import TriagePlan

if not structlog.is_configured():  # a library must not print INFO lines on stdout by default
    configure_logs()

__version__ = "0.1.0.dev0"

__all__ = [
    "Arm",
    "CorpusStats",
    "EmbeddingSpace",
    "Entry",
    "Event",
    "Explanation",
    "Grandbo",
    "GrandboError",
    "Hit",
    "Kind",
    "NewEntry",
    "OrgMemory",
    "RecallResult",
    "Settings",
    "Severity",
    "Source",
    "Status",
    "TriagePlan",
    "__version__",
]

_HOMES = {"Settings": "config", "GrandboError": "errors", "OrgMemory": "memory", "Grandbo": "service",
          "TriagePlan": "triage"}  # fmt: skip


# only at run time: to mypy a module `__getattr__` makes every unknown `grandbo.X` Any (`from grandbo import Grandob`)
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name not in __all__:
            raise AttributeError(f"module 'grandbo' has no attribute {name!r}")
        value = getattr(importlib.import_module(f"grandbo.{_HOMES.get(name, 'model')}"), name)
        globals()[name] = value  # imported once
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))
