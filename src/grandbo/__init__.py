"""Grandbo: institutional memory for AI agents and on-call teams."""

from __future__ import annotations

import structlog

from grandbo.config import Settings
from grandbo.errors import GrandboError
from grandbo.logs import configure as configure_logs
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
