"""The markdown history reader: post-mortems in the house styles teams keep them in, read into HistoricIncident."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grandbo.errors import ImportFormatError
from grandbo.history.record import HistoricIncident, Refusal, Skipped
from grandbo.history.sources.markdown import READER, MarkdownReader

FIXTURES = Path(__file__).parent / "data" / "history" / "markdown"


def write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def incident(folder: Path, text: str, name: str = "pm.md") -> HistoricIncident:
    [record] = READER.read(write(folder, name, text))
    assert isinstance(record, HistoricIncident), record
    return record


def refusal(folder: Path, text: str | bytes, name: str = "pm.md", reader: MarkdownReader = READER) -> Refusal:
    write(folder, name, text)
    records = list(reader.read(folder))
    assert len(records) == 1
    assert isinstance(records[0], Refusal), records[0]
    return records[0]


def by_location() -> dict[str, HistoricIncident | Refusal]:
    return {record.location: record for record in READER.read(FIXTURES)}


# --- the headings, matched forgivingly ---------------------------------------------------------------------------

HEADINGS = [
    ("## Summary", "summary"),
    ("### overview", "summary"),
    ("# TL;DR", "summary"),
    ("## 1. Executive Summary", "summary"),
    ("## What happened", "summary"),
    ("## Root cause", "cause"),
    ("## Root Cause(s)", "cause"),
    ("## 3) Root causes", "cause"),
    ("#### Cause", "cause"),
    ("## Root Cause Analysis", "cause"),
    ("## Trigger", "trigger"),
    ("## Triggering event", "trigger"),
    ("## Contributing Factors", "contributing"),
    ("## contributing factor", "contributing"),
    ("## Resolution", "remediation"),
    ("## Remediation", "remediation"),
    ("## Mitigation", "remediation"),
    ("## Fix", "remediation"),
    ("## Mitigation & Resolution", "remediation"),
    ("## Action items", "action"),
    ("## 7. Follow-ups", "action"),
    ("## Followups", "action"),
    ("## Next steps", "action"),
    ("## Lessons learned", "lesson"),
    ("## IV. Lessons Learned", "lesson"),
    ("## Learnings", "lesson"),
    ("## What went well", "lesson"),
    ("## What went wrong", "lesson"),
    ("## What didn't go well", "lesson"),
    ("## Timeline", "timeline"),
    ("## Timeline (all times UTC)", "timeline"),
    ("## Section 6 - Incident timeline", "timeline"),
    ("## Detection", "note"),
    ("Root cause\n----------", "cause"),
]


@pytest.mark.parametrize(("heading", "kind"), HEADINGS)
def test_every_heading_synonym_lands_where_its_kind_goes(tmp_path, heading, kind):
    record = incident(tmp_path, f"# Disk full on the build cache\n\n{heading}\n\nThe volume filled at 03:10.\n")
    if kind == "summary":
        assert record.summary == "The volume filled at 03:10."
        assert record.findings == [] and record.notes == []
    elif kind in ("timeline", "note"):
        assert record.findings == []
        assert record.notes == [
            "The volume filled at 03:10." if kind == "timeline" else "Detection: The volume filled at 03:10."
        ]
    else:
        assert [(f.kind, f.text.split(": ")[-1]) for f in record.findings] == [(kind, "The volume filled at 03:10.")]
        assert record.summary == ""


def test_a_heading_with_words_after_a_colon_keeps_them_in_its_section(tmp_path):
    record = incident(tmp_path, "# TLS outage\n\n## Root cause: the certificate expired\n\nNobody owned renewal.\n")
    assert [(f.kind, f.text) for f in record.findings] == [
        ("cause", "the certificate expired\n\nNobody owned renewal.")
    ]


def test_lessons_under_a_telling_heading_keep_it_and_plain_lessons_do_not(tmp_path):
    record = incident(
        tmp_path,
        "# X\n\n## Lessons learned\n\n- Drills need owners.\n\n## What went well\n\n- Paging was fast.\n\n"
        "## Where we got lucky\n\nLow traffic.\n",
    )
    assert [f.text for f in record.findings] == [
        "Drills need owners.",
        "What went well: Paging was fast.",
        "Where we got lucky: Low traffic.",
    ]


def test_impact_is_the_summary_when_nothing_else_is_and_a_note_otherwise(tmp_path):
    alone = incident(tmp_path, "# X\n\n## Customer impact\n\nCheckout failed for 5% of users.\n", "a.md")
    assert alone.summary == "Checkout failed for 5% of users."
    assert alone.notes == []
    beside = incident(tmp_path, "# X\n\n## Summary\n\nA deploy broke checkout.\n\n## Impact\n\n5% failed.\n", "b.md")
    assert beside.summary == "A deploy broke checkout."
    assert beside.notes == ["Impact: 5% failed."]


def test_the_paragraph_under_the_title_is_the_summary_when_there_is_no_summary_section(tmp_path):
    record = incident(tmp_path, "# X\n\nSeverity: SEV3\n\nThe cache evicted hot keys.\n\n## Cause\n\nA bad TTL.\n")
    assert record.summary == "The cache evicted hot keys."
    assert record.severity == "SEV3"


def test_an_unrecognized_sub_heading_stays_inside_its_section(tmp_path):
    record = incident(tmp_path, "# X\n\n## Root cause\n\nTwo things.\n\n### The pooler\n\nIt cached routes.\n")
    assert record.findings[0].text == "Two things.\n\n### The pooler\n\nIt cached routes."


def test_the_whole_document_without_front_matter_is_the_postmortem(tmp_path):
    text = "---\ntitle: A\n---\n# A\n\n## Summary\n\nS.\n"
    assert incident(tmp_path, text).postmortem == "# A\n\n## Summary\n\nS."


def test_a_hash_inside_a_code_block_is_not_a_heading(tmp_path):
    record = incident(
        tmp_path,
        "# X\n\n## Root cause\n\n```sh\n# Timeline\n## Action items\n- [ ] not an action\n```\n\n"
        "    # indented code, not a heading either\n\n## Fix\n\nRestarted.\n",
    )
    assert record.notes == []
    assert [f.kind for f in record.findings] == ["cause", "remediation"]
    assert "# Timeline\n## Action items" in record.findings[0].text
    assert "# indented code" in record.findings[0].text


def test_bold_labels_open_sections_where_a_page_has_no_headings():
    record = by_location()["wiki-export/cart-cache-stampede.md"]
    assert isinstance(record, HistoricIncident)
    assert record.title == "Cache stampede on the cart service (2019-06-03)"
    assert record.summary.startswith("The cart service's cache entries all expired together")
    assert record.status == "Complete, action items in progress"
    assert [f.kind for f in record.findings] == ["cause", "trigger", "remediation", "action", "action", "lesson"]
    assert record.findings[0].text.startswith("Every entry was written with the same one-hour TTL")
    assert record.notes == [
        "Impact: Carts failed to load for about a third of users for 22 minutes.",
        "Detection: The database CPU alert paged storage on-call, not the cart team.",
        "13:58 cache cluster restart begins",
        "14:59 cart database CPU at 100%; storage on-call paged",
        "15:21 cart reads shed at the edge; database recovers",
    ]
    assert record.started_at is None  # a date in the title is not read: never guessed


def test_a_label_inside_a_headed_section_is_its_text(tmp_path):
    record = incident(tmp_path, "# X\n\n## Timeline\n\nResolution: 14:30 rolled back\n\n- 14:40 recovered\n")
    assert record.findings == []
    assert record.notes == ["Resolution: 14:30 rolled back", "14:40 recovered"]


# --- front matter and the fields outside the sections ------------------------------------------------------------


def test_front_matter_fields_are_read_as_written():
    record = by_location()["2023/2023-04-12-orders-db-failover.md"]
    assert isinstance(record, HistoricIncident)
    assert record.source == "markdown"
    assert record.source_id == "PM-2023-014"
    assert record.title == "Orders database failover left writes on the old primary"
    assert record.url == "https://wiki.example.internal/postmortems/PM-2023-014"
    assert record.started_at == datetime(2023, 4, 12, 14, 2, tzinfo=UTC)
    assert record.resolved_at == datetime(2023, 4, 12, 15, 41, tzinfo=UTC)
    assert (record.severity, record.status) == ("SEV-2", "Resolved")
    assert record.services == ["orders-api", "orders-db"]
    assert record.labels == ["database", "failover", "Human Error"]
    assert record.runbooks == ["RB-112", "https://wiki.example.internal/runbooks/orders-db-failover"]
    assert "mira.k" not in record.model_dump_json(exclude={"postmortem"})  # authors are not kept
    assert [f.kind for f in record.findings] == [
        "cause", "trigger", "contributing", "contributing", "contributing", "remediation",
        "action", "action", "action", "lesson", "lesson",
    ]  # fmt: skip


def test_front_matter_takes_single_values_commas_and_other_key_spellings(tmp_path):
    record = incident(
        tmp_path,
        "---\nService: billing\nLabels: db, Stack Exchange\nrunbook: RB-7\nStarted-At: 2020-02-01\nsev: 2\n"
        "Title: Billing lag\n---\n## Summary\n\nLag.\n",
    )
    assert record.services == ["billing"]
    assert record.labels == ["db", "Stack Exchange"]
    assert record.runbooks == ["RB-7"]
    assert record.started_at == datetime(2020, 2, 1, tzinfo=UTC)
    assert record.severity == "2"
    assert record.title == "Billing lag"  # keys in any case


def test_key_value_lines_and_tables_fill_the_fields_without_front_matter():
    records = by_location()
    numbered, wiki = (
        records["numbered/edge-certificate-expiry.md"],
        records["wiki-export/Payments-outage-retry-storm.md"],
    )
    assert isinstance(numbered, HistoricIncident) and isinstance(wiki, HistoricIncident)
    assert numbered.title == "Post-mortem: Expired TLS certificate on the edge proxies"
    assert (numbered.severity, numbered.status) == ("P1", "Closed")
    assert numbered.services == ["edge-proxy", "web-frontend", "mobile-api"]
    assert numbered.runbooks == ["https://runbooks.example.internal/edge/cert-rotation"]
    assert wiki.title == "Payments outage: retry storm against the card gateway"
    assert (wiki.severity, wiki.status) == ("High", "Closed")
    assert wiki.services == ["payments-api", "card-gateway-client"]
    assert wiki.labels == ["retries", "third-party"]
    assert wiki.started_at == datetime(2022, 11, 3, 9, 15, tzinfo=UTC)
    assert wiki.resolved_at == datetime(2022, 11, 3, 10, 5, tzinfo=UTC)


def test_services_come_from_a_services_line(tmp_path):
    record = incident(tmp_path, "# X\n\n- **Affected services:** `api`, worker\n\n## Summary\n\nS.\n")
    assert record.services == ["api", "worker"]


def test_a_generic_title_is_kept_for_the_importer_to_replace():
    record = by_location()["incident-report.md"]
    assert isinstance(record, HistoricIncident)
    assert record.title == "Incident report"
    assert record.severity == "minor"


def test_a_wiki_page_titled_one_level_above_its_sections_keeps_its_title(tmp_path):
    assert incident(tmp_path, "## Checkout outage\n\n### Summary\n\nS.\n", "a.md").title == "Checkout outage"
    assert incident(tmp_path, "## Details\n\n## Summary\n\nS.\n", "b.md").title == ""


# --- dates: front matter, a Date: line, the file name, else unknown -----------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("Date: 2024-01-14", datetime(2024, 1, 14, tzinfo=UTC)),
        ("**Date:** 14 January 2024", datetime(2024, 1, 14, tzinfo=UTC)),
        ("Date: Sunday, 14 January 2024", datetime(2024, 1, 14, tzinfo=UTC)),
        ("Date: January 14, 2024", datetime(2024, 1, 14, tzinfo=UTC)),
        ("Date: 2024-01-14 09:30 UTC", datetime(2024, 1, 14, 9, 30, tzinfo=UTC)),
        ("Started: 2024-01-14T09:30:00+02:00", datetime(2024, 1, 14, 7, 30, tzinfo=UTC)),
        ("Date: 2024-01-14 09:30 PST (Wednesday)", datetime(2024, 1, 14, tzinfo=UTC)),  # a time in an unnamed zone
        ("Date: TBD", None),
        ("Date: Unknown", None),
        ("Owner: sam", None),
    ],
)
def test_the_date_comes_from_a_date_line(tmp_path, line, expected):
    assert incident(tmp_path, f"# X\n\n{line}\n\n## Summary\n\nS.\n").started_at == expected


def test_the_date_comes_from_the_file_name_when_nothing_else_has_it(tmp_path):
    assert incident(tmp_path, "# X\n\n## Summary\n\nS.\n", "2023-04-12-db-failover.md").started_at == datetime(
        2023, 4, 12, tzinfo=UTC
    )
    assert incident(tmp_path, "# X\n\n## Summary\n\nS.\n", "db-failover_2021_07_30.md").started_at == datetime(
        2021, 7, 30, tzinfo=UTC
    )
    assert incident(tmp_path, "# X\n\n## Summary\n\nS.\n", "build-20231301.md").started_at is None


def test_front_matter_beats_a_date_line_which_beats_the_file_name_and_unknown_falls_through(tmp_path):
    body = "# X\n\nDate: 2022-02-02\n\n## Summary\n\nS.\n"
    assert incident(tmp_path, f"---\ndate: 2021-01-01\n---\n{body}", "2020-03-03-a.md").started_at == datetime(
        2021, 1, 1, tzinfo=UTC
    )
    assert incident(tmp_path, f"---\ndate: Unknown\n---\n{body}", "2020-03-03-b.md").started_at == datetime(
        2022, 2, 2, tzinfo=UTC
    )
    assert incident(tmp_path, "---\ndate: TBD\n---\n## Summary\n\nS.\n", "2020-03-03-c.md").started_at == datetime(
        2020, 3, 3, tzinfo=UTC
    )


def test_no_date_anywhere_stays_unknown():
    record = by_location()["incident-report.md"]
    assert isinstance(record, HistoricIncident)
    assert record.started_at is None and record.resolved_at is None


# --- timeline and action items -----------------------------------------------------------------------------------


def test_timeline_list_items_are_notes_with_their_times():
    record = by_location()["2021-08-30-queue-backlog.md"]
    assert isinstance(record, HistoricIncident)
    assert record.notes == [
        "Impact: Notifications were delayed by up to 3 hours.",
        "10:05 deploy of consumer build 8812",
        "10:20 backlog alert fires, acknowledged but not investigated",
        "12:40 customer reports of missing notifications\nreach the support channel",
        "13:05 rollback",
    ]


def test_timeline_table_rows_are_notes_and_the_header_is_not():
    record = by_location()["wiki-export/Payments-outage-retry-storm.md"]
    assert isinstance(record, HistoricIncident)
    timeline = [note for note in record.notes if not note.startswith("Impact")]
    assert timeline[0] == "09:15 — Gateway latency rises; first payment timeouts"
    assert len(timeline) == 5
    assert not any("Time (UTC)" in note for note in record.notes)


def test_timeline_lines_of_a_paragraph_are_notes_one_each():
    record = by_location()["numbered/edge-certificate-expiry.md"]
    assert isinstance(record, HistoricIncident)
    assert record.notes[1:] == [
        "00:00 Certificate expires; synthetic checks fail",
        "00:04 On-call paged by the synthetic check",
        "00:31 Cause identified from `openssl s_client` output",
        "01:12 New certificate live on all proxies",
    ]


def test_timeline_items_under_a_day_heading_carry_the_day(tmp_path):
    record = incident(
        tmp_path, "# X\n\n## Timeline\n\n### 2023-05-01\n\n- 23:50 deploy\n\n### 2023-05-02\n\n- 00:10 paged\n"
    )
    assert record.notes == ["2023-05-01: 23:50 deploy", "2023-05-02: 00:10 paged"]


def test_action_items_are_one_finding_each_with_checkboxes_and_introductions_left_out(tmp_path):
    record = incident(
        tmp_path,
        "# X\n\n## Action items\n\nWe agreed on the following:\n\n- [ ] Add an alert on lag\n- [x] Fix the runbook\n"
        "  so it names the flag\n- Plain item\n\n1. [X] Numbered item\n",
    )
    assert [(f.kind, f.text) for f in record.findings] == [
        ("action", "Add an alert on lag"),
        ("action", "Fix the runbook\nso it names the flag"),
        ("action", "Plain item"),
        ("action", "Numbered item"),
    ]


def test_action_items_in_a_table_are_one_finding_per_row():
    record = by_location()["wiki-export/Payments-outage-retry-storm.md"]
    assert isinstance(record, HistoricIncident)
    assert [f.text for f in record.findings if f.kind == "action"] == [
        "Exponential backoff with jitter in the gateway client — payments — In progress",
        "Retry budget of 10% per client instance — payments — Open",
    ]


def test_a_remediation_list_stays_one_finding(tmp_path):
    record = incident(tmp_path, "# X\n\n## Mitigation\n\n1. Failed over.\n2. Flushed the cache.\n")
    assert [(f.kind, f.text) for f in record.findings] == [("remediation", "1. Failed over.\n2. Flushed the cache.")]


# --- refusals: what to fix, never a traceback ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("", "is empty"),
        ("  \n\n", "is empty"),
        ("# Caf\xe9 outage\n\n## Summary\n\nS.\n".encode("latin-1"), "is not UTF-8 (byte 5 is 0xe9)"),
        ("---\ntitle: A\n\n## Summary\n\nS.\n", "never closed"),
        ("---\ntitle: [unclosed\ndate: 2020-01-01\n---\n## Summary\n", "not valid YAML at line"),
        ("---\n- a\n- b\n---\n## Summary\n\nS.\n", "front matter is a list"),
        ("# A\n\x00\x01\n## Summary\n", "NUL"),
        ("# Post-mortems\n\nOne file per incident.\n", "none of the post-mortem headings"),
    ],
)
def test_a_file_it_cannot_read_is_refused_with_what_to_fix(tmp_path, content, says):
    found = refusal(tmp_path, content, "sub/2020-01-01-a.md")
    assert found.location == "sub/2020-01-01-a.md"
    assert says in found.reason


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path):
    found = refusal(tmp_path, "# A\n\n## Summary\n\n" + "x" * 2000, reader=MarkdownReader(max_bytes=1024))
    assert found.reason == "The file is 2 KB, over the 1 KB a post-mortem may hold; split it or move attachments out"


@pytest.mark.parametrize(
    ("name", "skipped"),
    [("_template.md", True), ("TEMPLATE.md", True), ("postmortem-template.md", True), ("templates-outage.md", False)],
)
def test_a_template_is_skipped_by_its_name_not_refused(tmp_path, name, skipped):
    # Fails on the old reader, which refused a template (and so made the import exit 1).
    write(tmp_path, name, "---\ntitle: <title>\n---\n## Summary\n")
    [record] = READER.read(tmp_path)
    assert isinstance(record, Skipped) is skipped and not isinstance(record, Refusal)


PIECES = ["---\n", "# ", "## Timeline\n", "### Action items\n", "- [ ] ", "1. ", "> ", "    ", "```\n", "\n", "x",
          "| a | b |\n|---|---|\n| 1 | 2 |\n", "Date: ", "2023-02-30", "Services: a, b\n", "id: 0\n", "title: [\n",
          "Root cause: y\n", "é", "\r", "\ufeff", "[r](https://e/x)", "<div>", "***\n", "Setext\n---\n"]  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(PIECES), max_size=40))
def test_any_markdown_is_read_or_refused_never_raised(tmp_path, pieces):
    path = write(tmp_path, "2023-01-01-any.md", "".join(pieces))
    [record] = READER.read(path)
    assert isinstance(record, HistoricIncident | Refusal)
    if isinstance(record, HistoricIncident):
        assert record.source_id and all(f.text.strip() for f in record.findings)


def test_front_matter_of_the_wrong_shape_is_read_as_absent_and_said(tmp_path):
    # Fails on the old reader, which wrote a list title as "['a', 'b']" and an object's tags as its keys, unsaid.
    text = "---\ntitle: [a, b]\ntags: {db: true}\nservices: [api, {name: x}]\ndate: TBD\n---\n## Summary\nslow\n"
    write(tmp_path, "2023-04-12-slow.md", text)
    [record] = READER.read(tmp_path)
    assert isinstance(record, HistoricIncident)
    assert (record.title, record.labels, record.services) == ("", [], ["api"])
    assert record.started_at == datetime(2023, 4, 12, tzinfo=UTC)  # the file name's date, as before
    assert record.ignored == [
        "date: 'TBD', not a date",
        "services[1]: an object, not one value",
        "title: a list, not one value",
        "tags: an object, not a list or a string",
    ]
    write(tmp_path, "2023-04-12-slow.md", "---\nid: [1, 2]\n---\n## Summary\nslow\n")
    [refused] = READER.read(tmp_path)
    assert isinstance(refused, Refusal) and "`id` is a list, not one value" in refused.reason


def test_an_id_of_zero_is_an_id(tmp_path):
    assert incident(tmp_path, "---\nid: 0\n---\n## Summary\n\nS.\n").source_id == "0"


def test_a_file_that_cannot_be_read_is_refused(tmp_path):
    (tmp_path / "gone.md").symlink_to(tmp_path / "nowhere.md")
    write(tmp_path, "ok.md", "# B\n\n## Summary\n\nS.\n")
    gone, ok = READER.read(tmp_path)
    assert isinstance(gone, Refusal) and isinstance(ok, HistoricIncident)
    assert gone.reason == "The file cannot be read (No such file or directory): check it exists"


def test_a_refusal_does_not_stop_the_walk(tmp_path):
    write(tmp_path, "a.md", "")
    write(tmp_path, "b.md", "# B\n\n## Summary\n\nS.\n")
    assert [type(r).__name__ for r in READER.read(tmp_path)] == ["Refusal", "HistoricIncident"]


def test_a_missing_path_an_empty_folder_and_a_map_are_errors_not_tracebacks(tmp_path):
    with pytest.raises(ImportFormatError, match="No such file or folder"):
        list(READER.read(tmp_path / "nope"))
    write(tmp_path, "notes.txt", "# X\n\n## Summary\n")
    with pytest.raises(ImportFormatError, match=r"No \.md or \.markdown file"):
        list(READER.read(tmp_path))
    with pytest.raises(ImportFormatError, match="takes no --map"):
        list(READER.read(tmp_path, {"title": "x"}))


# --- the folder walk -----------------------------------------------------------------------------------------------


def test_the_fixture_folder_is_walked_in_a_stable_order_with_stable_ids():
    first, second = list(READER.read(FIXTURES)), list(READER.read(FIXTURES))
    assert first == second
    assert [r.location for r in first] == [
        "2021-08-30-queue-backlog.md",
        "README.md",
        "_template.md",
        "incident-report.md",
        "2023/2023-04-12-orders-db-failover.md",
        "numbered/edge-certificate-expiry.md",
        "wiki-export/Payments-outage-retry-storm.md",
        "wiki-export/cart-cache-stampede.md",
    ]
    assert [r.source_id for r in first if isinstance(r, HistoricIncident)] == [
        "2021-08-30-queue-backlog",
        "incident-report",
        "PM-2023-014",
        "numbered/edge-certificate-expiry",
        "wiki-export/Payments-outage-retry-storm",
        "wiki-export/cart-cache-stampede",
    ]
    refused = {r.location: r.reason for r in first if isinstance(r, Refusal)}
    skipped = {r.location: r.reason for r in first if isinstance(r, Skipped)}
    assert (set(refused), set(skipped)) == ({"README.md"}, {"_template.md"})
    assert "template" in skipped["_template.md"]


def test_the_walk_takes_markdown_files_and_skips_hidden_folders(tmp_path):
    page = "# X\n\n## Summary\n\nS.\n"
    for name in ("b/one.markdown", "a.MD", ".obsidian/workspace.md", "c/.draft.md", "c/notes.txt", "c/d/two.md"):
        write(tmp_path, name, page)
    assert [r.location for r in READER.read(tmp_path)] == ["a.MD", "b/one.markdown", "c/d/two.md"]


def test_a_single_file_is_read_with_its_name_as_location(tmp_path):
    [record] = READER.read(FIXTURES / "2021-08-30-queue-backlog.md")
    assert isinstance(record, HistoricIncident)
    assert (record.location, record.source_id) == ("2021-08-30-queue-backlog.md", "2021-08-30-queue-backlog")


def test_files_are_read_one_at_a_time_as_the_walk_reaches_them(tmp_path):
    for name in ("a.md", "b.md", "c.md"):
        write(tmp_path, name, f"# {name}\n\n## Summary\n\nFirst version.\n")
    records = READER.read(tmp_path)
    first = next(records)
    assert isinstance(first, HistoricIncident) and first.title == "a.md"
    write(tmp_path, "b.md", "# b.md\n\n## Summary\n\nWritten after the walk began.\n")
    second = next(records)
    assert isinstance(second, HistoricIncident) and second.summary == "Written after the walk began."


def test_windows_line_endings_and_a_byte_order_mark_read_like_any_file(tmp_path):
    text = "\ufeff---\r\nid: W-1\r\n---\r\n# Win\r\n\r\n## Action items\r\n\r\n- [ ] One\r\n- [ ] Two\r\n"
    record = incident(tmp_path, text)
    assert (record.source_id, record.title) == ("W-1", "Win")
    assert [f.text for f in record.findings] == ["One", "Two"]
