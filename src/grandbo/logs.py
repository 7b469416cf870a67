"""Structured logs on stderr: event names like `memory.embedding_failed`, with counts, never secrets."""

from __future__ import annotations

import logging
import sys

import structlog

TOLD_AT_ANY_LEVEL = frozenset({"store.waiting_for_migration"})
"""Warnings shown whatever the level: a command that waits says what it waits for, its log lines off as they are by
default on the command line (a store's open waiting minutes for another process's migration was silent)."""


def configure(level: str = "WARNING", json: bool = False) -> None:
    """Route every Grandbo log line to stderr at `level`, as console lines or JSON, and TOLD_AT_ANY_LEVEL's."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.WARNING)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            _at_level(numeric),
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(min(numeric, logging.WARNING)),
        # Resolve sys.stderr at each call: test runners and embedding hosts swap it.
        logger_factory=lambda *_: structlog.PrintLogger(sys.stderr),
        cache_logger_on_first_use=False,
    )


def _at_level(numeric: int) -> structlog.typing.Processor:
    """Drop a line under `numeric` (warnings reach here at any level) unless its event is TOLD_AT_ANY_LEVEL."""
    levels = logging.getLevelNamesMapping()

    def kept(_: object, method: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
        if levels.get(method.upper(), logging.ERROR) < numeric and event.get("event") not in TOLD_AT_ANY_LEVEL:
            raise structlog.DropEvent
        return event

    return kept
