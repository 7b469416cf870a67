"""`grandbo profile|edit|notes|context|examples`: explicit and implicit memory on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grandbo.cli.app import JsonOption, OrgOption, _errors, _open, _print_json, _print_list, _read_json, _read_text, app
from grandbo.cli.options import command_group
from grandbo.cli.terminal import say
from grandbo.retrieval.policy import DEFAULT_POLICY
from grandbo.tiers.context import DEFAULT_BUDGET, MAX_BUDGET

profile_app = command_group("profile", "The explicit profile: facts, people, voice.")
notes_app = command_group("notes", "Rules learned from edits: list, approve, edit, reject, delete, prune.")
NoteArg = Annotated[str, typer.Argument(help="Note id.")]  # what approve, edit, reject and delete take, declared once


@profile_app.command("show")
def profile_show(org: OrgOption = None) -> None:
    """Print the explicit profile as JSON."""
    with _errors(), _open() as grandbo:
        profile = grandbo.org(org).profile.get()
    _print_json(profile.model_dump(mode="json"))


@profile_app.command("set")
def profile_set(
    fact: Annotated[
        list[str] | None, typer.Option("--fact", help="KEY=TEXT (empty TEXT removes it); repeatable.")
    ] = None,
    tone: Annotated[list[str] | None, typer.Option("--tone", help="Tone attribute (repeatable; replaces).")] = None,
    prefer: Annotated[list[str] | None, typer.Option("--prefer", help="Preferred word (repeatable; replaces).")] = None,
    avoid: Annotated[list[str] | None, typer.Option("--avoid", help="Word to avoid (repeatable; replaces).")] = None,
    sentences: Annotated[str | None, typer.Option(help="Sentence style, in words.")] = None,
    people: Annotated[
        Path | None, typer.Option(help="JSON file: [{name, role, notes}] (replaces).", exists=True, dir_okay=False)
    ] = None,
    org: OrgOption = None,
) -> None:
    """Change the explicit profile (every change is kept in its history)."""
    changes: dict[str, object] = {}
    if fact:
        pairs = [item.split("=", 1) for item in fact]
        if any(len(pair) != 2 for pair in pairs):
            say("error: --fact takes KEY=TEXT", err=True)
            raise typer.Exit(2)
        changes["facts"] = dict(pairs)
    voice = {"tone": tone, "preferred_words": prefer, "avoided_words": avoid, "sentence_style": sentences}
    if any(value is not None for value in voice.values()):
        changes["voice"] = {k: v for k, v in voice.items() if v is not None}
    with _errors():
        if people is not None:
            changes["people"] = _read_json(people, "a list of people: [{name, role, notes}]")
    with _errors(), _open() as grandbo:
        profile = grandbo.org(org).profile.update(changes, actor="cli")
    say(f"profile at version {profile.version}")


@app.command("edit")
def edit(
    draft: Annotated[Path, typer.Option(help="File with the agent's draft.", exists=True, dir_okay=False)],
    edited: Annotated[Path, typer.Option(help="File with the edited version.", exists=True, dir_okay=False)],
    content_type: Annotated[str, typer.Option("--type", help="status-update, post-mortem, customer-notice...")],
    author: Annotated[str, typer.Option(help="Who edited it.")],
    org: OrgOption = None,
    as_json: JsonOption = False,
) -> None:
    """Record how a person edited a draft; every third edit of a kind teaches a rule."""
    with _errors(), _open() as grandbo:
        learning = grandbo.org(org).learning
        signal, note = learning.record_edit(
            _read_text(draft), _read_text(edited), content_type=content_type, author=author,
        )  # fmt: skip
    if as_json:
        _print_json({"signal": signal.model_dump(mode="json", exclude={"draft", "edited"}),
                     "learned": note.model_dump(mode="json") if note else None})  # fmt: skip
        return
    later = "; the LLM's classification follows" if signal.awaiting_llm else ""  # its write-behind did not finish
    say(f"{signal.category.value}: {signal.summary} (by {signal.classified_by}{later})")
    if note:
        say(f"learned {note.id}: {note.text}")
        if note.status == "pending":  # it reaches no prompt yet: say what makes it count
            say(f"pending review: `grandbo notes approve {note.id}` puts it in the context block")


@notes_app.command("list")
def notes_list(
    all_notes: Annotated[bool, typer.Option("--all", help="Include rejected and archived notes.")] = False,
    org: OrgOption = None,
    as_json: JsonOption = False,
) -> None:
    """List learned notes."""
    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        learning = memory.learning
        notes = learning.notes(include_inactive=True) if all_notes else [*learning.notes(), *learning.pending()]
    empty = (
        f"no learned notes in org {memory.org!r} yet; a rule is learned from edits, one for every three of a "
        "kind (`grandbo edit --draft FILE --edited FILE --type TYPE --author NAME`)"
        if all_notes
        else f"no learned notes in force or waiting for review in org {memory.org!r} (`grandbo notes list "
        "--all` also lists rejected and archived ones; notes are learned from edits: `grandbo edit`)"
    )
    _print_list(
        notes, as_json, empty, lambda note: f"{note.id}  {note.status:<8} {note.category.value:<10} {note.text}"
    )


@notes_app.command("approve")
def notes_approve(note_id: NoteArg, org: OrgOption = None) -> None:
    """Approve a pending learned note: from now on it is part of the context block."""
    with _errors(), _open() as grandbo:
        note = grandbo.org(org).learning.approve_note(note_id, actor="cli")
    say(f"approved {note.id}: {note.text}")


@notes_app.command("edit")
def notes_edit(
    note_id: NoteArg,
    text: Annotated[str, typer.Argument(help="The rule, reworded.")],
    org: OrgOption = None,
) -> None:
    """Reword a learned note."""
    with _errors(), _open() as grandbo:
        note = grandbo.org(org).learning.edit_note(note_id, text, actor="cli")
    say(f"{note.id} is now: {note.text}")


@notes_app.command("reject")
def notes_reject(note_id: NoteArg, org: OrgOption = None) -> None:
    """Reject a learned note: it leaves the profile and is never learned again."""
    with _errors(), _open() as grandbo:
        grandbo.org(org).learning.reject_note(note_id, actor="cli")
    say(f"rejected {note_id}")


@notes_app.command("delete")
def notes_delete(note_id: NoteArg, org: OrgOption = None) -> None:
    """Delete a learned note, whatever its status: its text goes and it no longer counts toward
    GRANDBO_NOTES_PER_ORG; its rule is never learned again, as after a rejection."""
    with _errors(), _open() as grandbo:
        status = grandbo.org(org).learning.delete_note(note_id, actor="cli")
    say(f"deleted {note_id} (it was {status}; its rule will not be learned again)")


@notes_app.command("prune")
def notes_prune(org: OrgOption = None, as_json: JsonOption = False) -> None:
    """Delete the rejected and archived learned notes (room under GRANDBO_NOTES_PER_ORG); a rejected rule is still
    never learned again."""
    with _errors(), _open() as grandbo:
        pruned = grandbo.org(org).learning.prune_notes(actor="cli")
    if as_json:
        _print_json(pruned.to_dict())
        return
    say(f"deleted {pruned.rejected} rejected and {pruned.archived} archived notes (the rejected rules stay "
        "unlearned)")  # fmt: skip


@app.command("context")
def context(
    content_type: Annotated[str | None, typer.Option("--type", help="Only notes for this content type.")] = None,
    topic: Annotated[str | None, typer.Option(help="Also recall memories about this, in a separate block.")] = None,
    budget: Annotated[
        int, typer.Option(help="Size budget of the profile block, in characters.", min=1, max=MAX_BUDGET)
    ] = DEFAULT_BUDGET,
    org: OrgOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print the context block an agent's system prompt gets (profile, learned notes; recall after)."""
    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        block = memory.context(content_type=content_type, topic=topic, budget=budget)
    _print_json(block.model_dump()) if as_json else say(block.text)
    if not as_json and not block.text.strip():  # said on stderr: what is piped into a prompt stays the block
        say(
            f"the context block of org {memory.org!r} is empty: type the profile (`grandbo profile set --fact "
            f"NAME=TEXT --org {memory.org}`) or approve learned notes (`grandbo notes list`)",
            err=True,
        )


@app.command("examples")
def examples(
    content_type: Annotated[str, typer.Option("--type", help="Content type of the examples.")],
    limit: Annotated[int, typer.Option("-n", help="How many.", min=1, max=DEFAULT_POLICY.max_k)] = 5,
    org: OrgOption = None,
) -> None:
    """The newest examples of a content type (no query, no search, no score)."""
    with _errors(), _open() as grandbo:
        found = grandbo.org(org).examples(content_type, limit)
    _print_json([entry.model_dump(mode="json") for entry in found])
