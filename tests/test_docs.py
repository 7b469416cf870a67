"""The README documents every setting and every command the code has."""

import json
from pathlib import Path

import typer.main

from grandbo.cli import app
from grandbo.cli.app import accepted_range
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


def test_every_numeric_setting_s_row_says_the_range_the_code_declares():
    rows = {line.split(" | ")[0].strip("| `"): line.split(" | ")[2] for line in README.splitlines()
            if line.startswith("| `GRANDBO_")}  # fmt: skip
    declared = {f"GRANDBO_{name.upper()}": accepted_range(name) for name in Settings.model_fields}
    wrong = {name: (rows.get(name), said) for name, said in declared.items() if said and rows.get(name) != said}
    assert len([said for said in declared.values() if said]) >= 50 and wrong == {}


def test_every_command_is_documented():
    missing = [name for name in commands(typer.main.get_command(app)) if f"`grandbo {name}`" not in README]
    assert missing == []


def test_the_readme_names_every_command_that_takes_json_and_no_other():
    said = README.split("take `--json` (", 1)[1].split(";", 1)[0].replace(" and the lists:", ",").replace(" and ", ", ")
    named = {name.removesuffix(" --public").strip() for name in said.split(",")}
    root = typer.main.get_command(app)
    takes = {name for name in commands(root) if any("--json" in param.opts for param in _command(root, name).params)}
    assert sorted(takes - named) == [] and sorted(named - takes) == []


def _command(group, name):
    for word in name.split():
        group = group.commands[word]
    return group


def test_readme_has_no_unfilled_placeholders():
    for marker in ("TABLE", "_10K", "_100K", "INC_", "SF_", "PG_NUMBERS", "EMBED_MS", "LOCAL_RATE"):
        assert marker not in README, marker


def test_the_readme_tour_s_example_files_work_as_the_readme_uses_them(cli):
    examples = Path(__file__).resolve().parent.parent / "examples"
    assert "imported 3 entries" in cli("import", str(examples / "incidents.jsonl")).stdout
    assert "imported 6 services" in cli("catalog", "import", str(examples / "services.yaml")).stdout
    edit = [str(examples / "draft.txt"), "--edited", str(examples / "edited.txt"), "--type", "status-update"]
    learned = [cli("edit", "--draft", *edit, "--author", "alice").stdout for _ in range(3)]
    assert "learned note-" in learned[-1]  # a rule a team wants: the example taught "write longer sentences"
    assert "write 'customers' instead of 'users'; 'seeing errors' instead of 'experiencing issues'." in learned[-1]
    plans = json.loads(cli("triage", str(examples / "alert.json"), "--source", "alertmanager", "--json").stdout)
    assert [plan["service"] for plan in plans] == ["auth-service"] and "eviction" in plans[0]["query"]
    forgot = cli("triage", str(examples / "alert.json"), code=2)  # the vendor's payload without --source
    assert "add --source alertmanager" in forgot.stderr and "Traceback" not in forgot.stderr
