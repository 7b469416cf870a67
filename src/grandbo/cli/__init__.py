"""`grandbo`: the command line for people and scripts, one module per command group. Every command acts
through the org-bound handle, like the API."""

from __future__ import annotations

from grandbo.cli import admin, changes, evaluation, history, incidents, memory, profile, service, triage
from grandbo.cli.app import app
from grandbo.cli.helptext import tidy

__all__ = ["app", "main"]
_GROUPS = (
    admin,
    changes,
    evaluation,
    history,
    incidents,
    memory,
    profile,
    service,
    triage,
)  # imported for the commands they register
tidy(app)  # once they are: how --help shows them


def main() -> None:
    app()
