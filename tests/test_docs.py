"""The README documents every setting and every command the code has."""

import json
import re
import shlex
from pathlib import Path

import typer.main

from grandbo.cli import app
from grandbo.cli.app import accepted_range
from grandbo.config import Settings

README_PATH = Path(__file__).parent.parent / "README.md"
README = README_PATH.read_text()


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


def _written_commands(text):
    """Each `grandbo ...` the text shows, inline or on a line of a shell block, as its words."""
    shown, shell = re.findall(r"`(grandbo [^`]+)`", text), False
    for line in text.splitlines():
        if line.startswith("```"):
            shell = line in ("```sh", "```bash") and not shell
        elif shell:
            shown += re.findall(r"(?:^|[\s(;|&$])(grandbo [a-z][^#|;&)]*)", line)
    for line in shown:
        try:
            yield shlex.split(line.replace("\\", " "), comments=True)[1:]
        except ValueError:  # a quote the line does not close (a command cut across two lines of prose)
            yield line.split()[1:]


def _wrong_commands(text):
    """The `grandbo` lines of a page that name no command, or an option their command does not have; and how many."""
    root, wrong, seen = typer.main.get_command(app), [], 0
    for words in _written_commands(text):
        command, path = root, []
        while hasattr(command, "commands") and words[len(path) :] and words[len(path)] in command.commands:
            command = command.commands[words[len(path)]]
            path.append(words[len(path)])
        if hasattr(command, "commands"):  # a group named alone (fine), or with a word none of its commands is
            stray = words[len(path) :][:1]
            wrong += [words] if stray and re.fullmatch(r"[a-z][a-z-]+", stray[0]) else []
            continue
        seen += 1
        options = {"--help"} | {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        wrong += [words for word in words if word.startswith("--") and word.split("=")[0] not in options]
    return wrong, seen


def test_every_command_and_option_the_docs_show_exists():
    """A renamed command or option, or one never written, in the README or docs/ (they show about 390 lines)."""
    pages = (README_PATH, *sorted(README_PATH.parent.glob("docs/*.md")))
    found = {page.name: _wrong_commands(page.read_text()) for page in pages}
    assert {name: wrong for name, (wrong, _) in found.items() if wrong} == {}
    assert sum(seen for _, seen in found.values()) > 300
    typos = README.replace("grandbo stats   ", "grandbo stats --jsn", 1).replace(
        "`grandbo keys list`", "`grandbo keys lst`"
    )
    assert sorted(_wrong_commands(typos)[0]) == [["keys", "lst"], ["stats", "--jsn"]]  # the check sees a typo


def test_every_relative_link_of_the_docs_names_a_file_there_is():
    pages = (README_PATH, *sorted(README_PATH.parent.glob("docs/*.md")))
    links = [
        (page, target.split("#")[0])
        for page in pages
        for target in re.findall(r"\]\(([^)\s#]+)[^)]*\)", page.read_text())
    ]
    assert [(page.name, to) for page, to in links if "://" not in to and not (page.parent / to).exists()] == []
    headings = {
        re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-") for title in re.findall(r"^#+ (.*)$", README, re.M)
    }
    anchors = re.findall(r"\]\(#([^)]+)\)", README)  # the README's table of contents
    assert len(links) > 5 and len(anchors) > 10 and [anchor for anchor in anchors if anchor not in headings] == []


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
