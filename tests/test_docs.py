"""The README documents every setting and every command the code has."""

from pathlib import Path

import typer.main

from grandbo.cli import app
from grandbo.config import Settings

README = (Path(__file__).parent.parent / "README.md").read_text()


def commands(group, prefix=""):
    for name, sub in group.commands.items():
        if hasattr(sub, "commands"):
            yield from commands(sub, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}"


def test_every_setting_is_documented():
    missing = [f"GRANDBO_{name.upper()}" for name in Settings.model_fields if f"`GRANDBO_{name.upper()}`" not in README]
    assert missing == []


def test_every_command_is_documented():
    missing = [name for name in commands(typer.main.get_command(app)) if f"`grandbo {name}`" not in README]
    assert missing == []


def test_readme_has_no_unfilled_placeholders():
    for marker in ("TABLE", "_10K", "_100K", "INC_", "SF_", "PG_NUMBERS", "EMBED_MS", "LOCAL_RATE"):
        assert marker not in README, marker
