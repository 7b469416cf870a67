"""What commands of several modules share, declared once: the command groups (`grandbo NAME ...`) and the
options more than one module's commands take (those of one module's commands are declared in it)."""

from __future__ import annotations

from typing import Annotated

import typer

from grandbo.cli.app import app


def command_group(name: str, about: str) -> typer.Typer:
    """The commands under `grandbo NAME`, described by `about` (which `grandbo NAME` alone prints)."""
    group = typer.Typer(help=about, no_args_is_help=True)
    app.add_typer(group, name=name)
    return group


SeverityOption = Annotated[str | None, typer.Option(help="sev1..sev5, P1..P5 or critical/high/medium/low.")]
