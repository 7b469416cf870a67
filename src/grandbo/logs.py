"""Structured logs on stderr: event names like `memory.embedding_failed`, with counts, never secrets."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(level: str = "WARNING", json: bool = False) -> None:
    """Route every Grandbo log line to stderr at `level`, as console lines or JSON."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.WARNING)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # Resolve sys.stderr at each call: test runners and embedding hosts swap it.
        logger_factory=lambda *_: structlog.PrintLogger(sys.stderr),
        cache_logger_on_first_use=False,
    )
