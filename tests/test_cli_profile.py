"""Explicit and implicit memory through the CLI."""

import json


def test_profile_edits_notes_context_and_examples(tmp_path, cli):
    run = cli
    run(
        "profile",
        "set",
        "--fact",
        "name=Quillroute",
        "--fact",
        "products=parcel delivery",
        "--tone",
        "calm",
        "--avoid",
        "users",
        "--sentences",
        "short, active voice",
    )
    profile = json.loads(run("profile", "show").stdout)
    assert profile["facts"]["name"] == "Quillroute" and profile["voice"]["avoided_words"] == ["users"]
    draft, edited = tmp_path / "draft.txt", tmp_path / "edited.txt"
    learned = None
    for text in ("Checkout is back!", "Search is fast again!", "Labels print again!"):
        draft.write_text(text)
        edited.write_text(text.replace("!", "."))
        out = run(
            "edit",
            "--draft",
            str(draft),
            "--edited",
            str(edited),
            "--type",
            "status-update",
            "--author",
            "alice",
            "--json",
        ).stdout
        learned = json.loads(out)["learned"] or learned
    assert learned and learned["category"] == "tone" and "'!'" in learned["text"]
    assert f"{learned['id']}  pending" in run("notes", "list").stdout
    assert "learned from edits" not in run("context").stdout  # not before an admin's review
    run("notes", "approve", learned["id"])
    assert "learned notes wait for review" in run("settings", "learning").stdout
    block = run("context", "--type", "status-update").stdout
    assert block.startswith("Organization:") and "Tone and style (learned from edits):" in block
    assert "- words to avoid: users" in block
    run("notes", "reject", learned["id"])
    assert "learned from edits" not in run("context").stdout
    run(
        "remember",
        "--title",
        "Status update: checkout restored",
        "--kind",
        "example",
        "--body",
        "All good.",
        "--meta",
        "content_type=status-update",
    )
    found = json.loads(run("examples", "--type", "status-update").stdout)
    assert [e["title"] for e in found] == ["Status update: checkout restored"] and "score" not in found[0]
    assert json.loads(run("examples", "--type", "customer-notice").stdout) == []
    assert "--fact takes KEY=TEXT" in run("profile", "set", "--fact", "oops", code=2).stderr


def test_a_fact_without_a_name_is_refused_not_dropped(cli):
    """`--fact =text` (and PATCH {"facts": {"": ...}}) printed "profile at version N" and kept nothing."""
    refused = cli("profile", "set", "--fact", "=parcel delivery", code=2)
    assert "A fact needs a name" in refused.stderr
    refused = cli("profile", "set", "--fact", "   =parcel delivery", "--fact", "name=Quillroute", code=2)
    assert json.loads(cli("profile", "show").stdout)["version"] == 0  # nothing of the change was written


def test_a_note_learned_pending_review_says_so_and_how_to_approve_it(tmp_path, cli):
    """`grandbo edit` printed "learned note-...: rule" for a note that reaches no prompt until approved."""
    draft, edited = tmp_path / "draft.txt", tmp_path / "edited.txt"
    for text in ("Checkout is back!", "Search is fast again!", "Labels print again!"):
        draft.write_text(text)
        edited.write_text(text.replace("!", "."))
        out = cli("edit", "--draft", str(draft), "--edited", str(edited), "--type", "status", "--author", "a").stdout
    (note,) = json.loads(cli("notes", "list", "--json").stdout)
    assert f"pending review: `grandbo notes approve {note['id']}`" in out
    cli("settings", "learning", "--auto-apply")
    for text in ("We are really sorry.", "It is very slow.", "We really fixed it."):
        draft.write_text(text)
        edited.write_text(text.replace("really ", "").replace("very ", ""))
        out = cli("edit", "--draft", str(draft), "--edited", str(edited), "--type", "status", "--author", "a").stdout
    assert "learned note-" in out and "pending review" not in out


def test_a_context_budget_below_one_character_is_refused(cli):
    """`grandbo context --budget 0` (or -5) printed an empty block and exit 0."""
    cli("profile", "set", "--fact", "name=Quillroute")
    for budget in ("0", "-5"):
        assert "--budget" in cli("context", "--budget", budget, code=2).stderr
    assert "Quillroute" in cli("context", "--budget", "40").stdout


def test_an_edit_without_an_author_is_refused_as_the_api_refuses_it(tmp_path, cli):
    """`grandbo edit --author ""` stored a signal by nobody; POST /v1/signals refuses an empty author."""
    draft, edited = tmp_path / "draft.txt", tmp_path / "edited.txt"
    draft.write_text("Some users could not pay.")
    edited.write_text("Some customers could not pay.")
    for author in ("", "   "):
        refused = cli("edit", "--draft", str(draft), "--edited", str(edited), "--type", "n", "--author", author, code=2)
        assert "Name who edited the draft" in refused.stderr
    out = cli("edit", "--draft", str(draft), "--edited", str(edited), "--type", "n", "--author", " ana ", "--json")
    assert json.loads(out.stdout)["signal"]["author"] == "ana"


def test_a_reworded_note_longer_than_the_api_takes_is_refused_on_the_cli_too(tmp_path, cli):
    """PATCH /v1/notes/ID refuses more than 2000 characters; `grandbo notes edit` kept any length."""
    cli("settings", "learning", "--auto-apply")
    draft, edited = tmp_path / "draft.txt", tmp_path / "edited.txt"
    for text in ("Checkout is back!", "Search is fast again!", "Labels print again!"):
        draft.write_text(text)
        edited.write_text(text.replace("!", "."))
        cli("edit", "--draft", str(draft), "--edited", str(edited), "--type", "status", "--author", "a")
    (note,) = json.loads(cli("notes", "list", "--json").stdout)
    refused = cli("notes", "edit", note["id"], "x" * 2001, code=2)
    assert "at most 2000 characters (this one has 2001)" in refused.stderr
    assert json.loads(cli("notes", "list", "--json").stdout)[0]["text"] == note["text"]
