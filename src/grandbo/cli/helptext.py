"""How `--help` shows the commands: every command and group of the app is built as one of the classes here
(`tidy`), which correct what typer 0.29 prints from our declarations.

* A flag (`--json`, `--force`, `--replace/--no-replace`) takes no value, but typer labels its type `<bool>`, as if
  `--json true` were asked for: it is shown with no type, as `--help` itself.
* An option given once per value (`--tag a --tag b`) was labelled `<list[str]>`, as if it took one list: it is shown
  as `<str>, repeatable`.
* A group lists its commands by the first paragraph of each one's docstring, which typer keeps with its line breaks
  (a docstring wraps at 120 columns, the list at the terminal's width: "... and grant the" then "runtime role" on a
  line of its own): the paragraph is given as one line (`short_help`), which the list wraps.
"""

from __future__ import annotations

import inspect
from typing import Any, get_args

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption
from typer.models import DefaultPlaceholder

REPEATABLE = ", repeatable"


def _shown(params: list[Any]) -> None:
    for param in params:
        if not isinstance(param, TyperOption) or param.metavar is not None:
            continue
        if param.is_flag:
            param.metavar = ""
        elif (
            param.multiple
            and len(kinds := get_args(param.type_descriptor.annotation)) == 1
            and isinstance(kinds[0], type)
        ):
            param.metavar = f"<{kinds[0].__name__}>{REPEATABLE}"


def _one_line(command: Any) -> None:
    if command.short_help is None and command.help:
        first = inspect.cleandoc(command.help).split("\n\n")[0]
        if not first.startswith("\b"):  # a paragraph click is told to keep as written
            command.short_help = " ".join(first.split())


class _Tidied:
    """What `_Command` and `_Group` add to typer's classes: options shown as `_shown` says, a one-line summary."""

    params: list[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _shown(self.params)
        _one_line(self)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        _shown([option])
        return option


class _Command(_Tidied, TyperCommand):
    pass


class _Group(_Tidied, TyperGroup):
    pass


def tidy(app: typer.Typer) -> None:
    """Build every command and group of `app` (and of its groups, recursively) as `_Command` and `_Group`; call it
    once every command is registered. A class of our own that a command names is kept."""
    if app.info.cls is None or isinstance(app.info.cls, DefaultPlaceholder):
        app.info.cls = _Group
    for command in app.registered_commands:
        if command.cls in (None, TyperCommand):  # typer's default, which `app.command()` names
            command.cls = _Command
    for group in app.registered_groups:
        if group.typer_instance is not None:
            tidy(group.typer_instance)
