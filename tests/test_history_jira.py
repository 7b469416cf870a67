"""The Jira reader: search pages (Cloud v3 with ADF, Server v2 with plain text) to HistoricIncidents.

Payloads in tests/data/history/jira/ follow Jira's documented response shapes (NOTE.md there says which).
"""

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from grandbo.errors import ImportFormatError
from grandbo.history.record import HistoricFinding, HistoricIncident, Refusal, Skipped
from grandbo.history.sources._adf import to_markdown
from grandbo.history.sources.jira import READER
from tests.history_shapes import check_any_value_anywhere_is_read_or_refused, read_and_peak

DATA = Path(__file__).parent / "data" / "history" / "jira"


def read(path):
    return list(READER.read(path))


def adf(*content):
    return {"version": 1, "type": "doc", "content": list(content)}


def para(*inline):
    return {"type": "paragraph", "content": list(inline)}


def text(value, *marks):
    node = {"type": "text", "text": value}
    if marks:
        node["marks"] = list(marks)
    return node


def issue(key, **fields):
    return {"id": "1" + key[-3:], "self": f"https://x.atlassian.net/rest/api/3/issue/1{key[-3:]}", "key": key,
            "fields": {"summary": f"issue {key}", **fields}}  # fmt: skip


def test_every_field_of_a_cloud_issue_is_mapped():
    first = read(DATA / "search_pages.json")[0]
    assert isinstance(first, HistoricIncident)
    assert first.source == "jira"
    assert first.source_id == "OPS-412"
    assert first.location == "page 1, issues[0]"
    assert first.url == "https://acme-ops.atlassian.net/browse/OPS-412"
    assert first.title == "Checkout 503s while orders migration held a lock"
    assert first.started_at == datetime(2025, 3, 2, 9, 14, 5, 120000, tzinfo=UTC)
    assert first.resolved_at == datetime(2025, 3, 2, 11, 2, 44, tzinfo=UTC)
    assert first.status == "Done"
    assert first.severity == "Highest"  # the source's own word; the importer maps it
    assert first.services == ["checkout-api", "orders-db"]
    assert first.labels == ["postgres", "customer-facing", "Database/Human Error"]  # kept as written
    assert first.notes == [
        "2025-03-02T09:41:10.000+0000 Oskar Lind: Migration killed, pool draining.",
        "2025-03-02T10:05:00.000+0000 Mia Krystof: Follow-up: add `lock_timeout` to migrations.",
    ]
    assert first.summary.startswith("## What happened\n\nCheckout returned **HTTP 503** for 38 minutes")


def test_the_adf_description_becomes_markdown_with_headings_lists_code_and_tables():
    summary = read(DATA / "search_pages.json")[0].summary
    assert "### Root cause" in summary
    assert (
        "- A migration held a lock on *orders*\n- Connections piled up behind it\n  - pool size 200 reached" in summary
    )
    assert "1. Killed the migration\n2. Restarted [pgbouncer](https://wiki.acme.example/runbooks/pgbouncer)" in summary
    assert (
        "```sql\n# the query that showed it\nSELECT pid, state FROM pg_stat_activity\nWHERE wait_event_type = 'Lock';\n```"
        in summary
    )
    assert "Paged by @Oskar Lind see https://grafana.acme.example/d/pg-pool" in summary
    assert "Customer impact: about 1,900 failed orders." in summary  # a panel's text
    assert "| Time | Event |\n| --- | --- |\n| 09:14 | First 503 |" in summary


def test_adf_inline_nodes_and_task_lists_keep_their_words():
    assert to_markdown(
        adf(
            {
                "type": "taskList",
                "content": [
                    {"type": "taskItem", "attrs": {"state": "DONE"}, "content": [text("roll back")]},
                    {"type": "taskItem", "attrs": {"state": "TODO"}, "content": [text("add an alert")]},
                ],
            },
            para(
                text("due "),
                {"type": "date", "attrs": {"timestamp": "1741737600000"}},
                text(" "),
                {"type": "status", "attrs": {"text": "BLOCKED", "color": "red"}},
                text(" "),
                {"type": "emoji", "attrs": {"shortName": ":fire:", "text": "🔥"}},
                {"type": "hardBreak"},
                text("gone", {"type": "strike"}),
            ),
            {"type": "blockquote", "content": [para(text("quoted"))]},
            {
                "type": "orderedList",
                "attrs": {"order": 3},
                "content": [{"type": "listItem", "content": [para(text("c"))]}],
            },
            {"type": "expand", "attrs": {"title": "Details"}, "content": [para(text("hidden"))]},
            {"type": "someFutureNode", "content": [para(text("still read"))]},
        )
    ) == (
        "- [x] roll back\n- [ ] add an alert\n\ndue 2025-03-12 [BLOCKED] 🔥\n~~gone~~\n\n> quoted\n\n3. c\n\n"
        "**Details**\n\nhidden\n\nstill read"
    )


def test_adf_that_is_not_a_document_gives_no_text_rather_than_an_error():
    assert to_markdown(None) == ""
    assert to_markdown(["not", "a", "doc"]) == ""
    assert to_markdown({"type": "doc", "content": [{"type": "paragraph", "content": "oops"}, 7]}) == ""


def test_description_sections_under_finding_headings_become_findings():
    first = read(DATA / "search_pages.json")[0]
    assert first.findings == [
        HistoricFinding(
            kind="cause",
            text="- A migration held a lock on *orders*\n- Connections piled up behind it\n  - pool size 200 reached",
        ),
        HistoricFinding(
            kind="remediation",
            # The code block's `# the query...` line is code, not a heading that would end the section.
            text="1. Killed the migration\n2. Restarted [pgbouncer](https://wiki.acme.example/runbooks/pgbouncer)\n\n"
            "```sql\n# the query that showed it\nSELECT pid, state FROM pg_stat_activity\n"
            "WHERE wait_event_type = 'Lock';\n```",
        ),
    ]  # "What happened" and "Impact" name no finding: they stay in the summary only


def test_pages_of_both_search_endpoints_are_read_in_order_with_their_locations():
    found = read(DATA / "search_pages.json")
    assert [r.location for r in found] == [
        "page 1, issues[0]",
        "page 1, issues[1]",
        "page 1, issues[2]",
        "page 2, issues[0]",
    ]
    assert [r.source_id for r in found if isinstance(r, HistoricIncident)] == ["OPS-412", "OPS-419", "OPS-431"]


def test_one_page_and_json_lines_of_pages_read_the_same_issues(tmp_path):
    pages = json.loads((DATA / "search_pages.json").read_text())
    single = tmp_path / "one.json"
    single.write_text(json.dumps(pages[0]))
    lines = tmp_path / "pages.jsonl"
    lines.write_text("\n".join(json.dumps(p) for p in pages) + "\n")
    assert [r.location for r in read(single)] == ["issues[0]", "issues[1]", "issues[2]"]
    from_lines = read(lines)
    assert [r.location for r in from_lines][-1] == "page 2, issues[0]"
    assert [r.model_dump() for r in from_lines] == [r.model_dump() for r in read(DATA / "search_pages.json")]


def test_an_issue_without_a_key_is_refused_with_where_and_what_to_do():
    refusal = read(DATA / "search_pages.json")[2]
    assert refusal == Refusal(
        location="page 1, issues[2]",
        reason="an issue with neither `key` nor `id`: export the search answer as Jira returns it",
    )


def test_missing_or_unreadable_times_stay_unknown():
    found = read(DATA / "search_pages.json")
    assert found[1].resolved_at is None  # not resolved yet
    assert found[3].started_at is None  # `created` is "not a date": unknown, never guessed, and said
    assert found[3].ignored == ["fields.created: 'not a date', not an ISO 8601 time"]
    assert found[3].resolved_at == datetime(2025, 3, 12, 8, tzinfo=UTC)


def test_a_server_issue_keeps_its_plain_text_description_and_comments():
    (only,) = read(DATA / "search_v2_server.json")
    assert only.location == "issues[0]"
    assert only.url == "https://jira.acme.internal/browse/INC-88"
    assert only.summary == "h2. Impact\nCard payments timed out.\nh2. Root cause\n* TLS handshake to provider stalled"
    assert only.findings == [HistoricFinding(kind="cause", text="* TLS handshake to provider stalled")]
    assert only.notes == ["2019-11-20T14:40:00.000+0100 Rita Voss: Provider confirmed a bad certificate rollout."]
    assert only.started_at == datetime(2019, 11, 20, 14, 3, 11, tzinfo=timezone(timedelta(hours=1)))
    assert (only.severity, only.status, only.services) == ("Critical", "Closed", ["gateway"])


def test_a_status_in_the_done_category_reads_done_whatever_the_workflow_named_it(tmp_path):
    def status(name, key):
        return {"name": name, "id": "1", "statusCategory": {"id": 3, "key": key, "name": "Erledigt"}}

    path = tmp_path / "page.json"
    path.write_text(
        json.dumps(
            {
                "issues": [
                    issue("OPS-001", status=status("Resolved - pending PIR", "done")),
                    issue("OPS-002", status=status("Mitigated", "indeterminate")),
                    issue("OPS-003", status={"name": "Closed"}),
                ]
            }
        )
    )
    assert [r.status for r in read(path)] == ["Done", "Mitigated", "Closed"]


def test_an_issue_resolved_as_a_duplicate_is_skipped_not_refused(tmp_path):
    # Fails on the old reader, which refused it (and so made the import exit 1).
    path = tmp_path / "page.json"
    duplicate = issue("OPS-001", resolution={"id": "10002", "name": "Duplicate", "description": "already reported"})
    fixed = issue("OPS-002", resolution={"id": "10000", "name": "Done"})
    path.write_text(json.dumps({"issues": [duplicate, fixed]}))
    skipped, kept = read(path)
    assert isinstance(skipped, Skipped)
    assert skipped.location == "issues[0]" and "resolved as a duplicate" in skipped.reason
    assert kept.source_id == "OPS-002"


def test_a_field_of_the_wrong_type_is_read_as_absent_and_said(tmp_path):
    # Fails on the old reader, which read these as absent without a word.
    path = tmp_path / "page.json"
    odd = issue("OPS-001", labels="database", components=[{"name": "orders"}, "billing"], priority=["P1"])
    path.write_text(json.dumps({"issues": [odd]}))
    (only,) = read(path)
    assert (only.labels, only.services, only.severity) == ([], ["orders"], "")
    assert only.ignored == [  # in the order they were read
        "fields.priority: a list, not a string",
        "fields.components[1]: a string, not an object",
        "fields.labels: a string, not a list",
    ]


def test_comments_beyond_the_answer_s_first_page_are_said_to_be_missing(tmp_path):
    body = adf(para(text("rolled back")))
    comments = {"comments": [{"body": body, "created": "2025-01-01T00:00:00.000+0000"}], "maxResults": 1, "total": 3}
    path = tmp_path / "page.json"
    path.write_text(json.dumps({"issues": [issue("OPS-001", comment=comments)]}))
    (only,) = read(path)
    assert only.notes == ["2025-01-01T00:00:00.000+0000: rolled back", "(1 of 3 comments were in the export)"]


def test_an_issue_without_fields_or_a_self_link_is_handled(tmp_path):
    path = tmp_path / "page.json"
    path.write_text(json.dumps({"issues": [{"key": "OPS-1"}, {"key": "OPS-2", "fields": {}}]}))
    refused, bare = read(path)
    assert refused.location == "issues[0]" and "fields=*all" in refused.reason
    assert (bare.source_id, bare.url, bare.title, bare.started_at, bare.notes) == ("OPS-2", None, "", None, [])


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("key,summary\nOPS-1,csv export", "is not JSON"),
        ("", "is empty"),
        ("42", "bare JSON number"),
    ],
)
def test_a_file_that_is_not_a_search_answer_is_one_clear_error(tmp_path, content, said):
    path = tmp_path / "export.json"
    path.write_text(content)
    with pytest.raises(ImportFormatError) as caught:
        read(path)
    assert said in caught.value.message
    assert "/rest/api/3/search" in caught.value.message  # the remedy: what to export


def test_a_folder_or_bytes_that_are_not_utf8_are_one_clear_error(tmp_path):
    with pytest.raises(ImportFormatError) as caught:
        read(tmp_path)
    assert caught.value.message.startswith(f"cannot read {tmp_path}: Is a directory; give the path of the exported")
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"issues": [{"key": "OPS-1", "fields": {"summary": "caf\xe9"}}]}')
    with pytest.raises(ImportFormatError) as caught:
        read(path)
    said = "latin1.json is not JSON in the string ending at line 1, column 57 (lexical error: invalid bytes in UTF8"
    assert said in caught.value.message


def test_a_page_whose_issues_are_not_an_array_is_refused(tmp_path):
    path = tmp_path / "export.json"
    path.write_text(json.dumps([{"issues": None}, {"issues": {"key": "OPS-1"}}, {"issues": []}]))
    assert [(r.location, r.reason.split(":")[0]) for r in read(path)] == [
        ("page 1", "no `issues` array in this page"),
        ("page 2", "no `issues` array in this page"),
    ]  # page 3 is an empty page: nothing to read, nothing refused


def test_a_page_of_something_else_is_refused_not_skipped(tmp_path):
    path = tmp_path / "export.json"
    path.write_text(json.dumps([{"values": [{"id": 1}]}, {"issues": [{"key": "OPS-9", "fields": {}}]}, "oops"]))
    found = read(path)
    assert found[0] == Refusal(location="page 1", reason=found[0].reason)
    assert "no `issues` array" in found[0].reason
    assert found[1].source_id == "OPS-9"
    assert found[2].location == "page 3" and "not a page" in found[2].reason


def test_an_issue_that_is_not_an_object_is_refused(tmp_path):
    path = tmp_path / "export.json"
    path.write_text(json.dumps({"issues": ["OPS-1", ["OPS-2"], {"key": "OPS-3", "fields": {}}]}))
    found = read(path)
    assert [type(r).__name__ for r in found] == ["Refusal", "Refusal", "HistoricIncident"]
    assert found[0].location == "issues[0]" and "a string where a record (an object) was expected" in found[0].reason
    assert found[1].location == "issues[1]"
    assert found[2].location == "issues[2]"


def test_a_file_cut_off_midway_keeps_what_was_read_and_says_where_it_broke(tmp_path):
    whole = (DATA / "search_v2_server.json").read_text()
    page = json.loads(whole)
    page["issues"].append(dict(page["issues"][0], key="INC-89"))
    text_ = json.dumps(page)
    path = tmp_path / "cut.json"
    path.write_text(text_[: text_.index('"INC-89"') + 20])
    found = read(path)
    assert found[0].source_id == "INC-88"
    assert found[1].location == "issues[1]"
    assert "stops being JSON" in found[1].reason


def write_big_export(path, pages, per_page):
    """A search export of `pages` x `per_page` issues, each with an ADF description and two comments."""
    body = adf(para(text("connection pool exhausted on " + "orders-db " * 40)))
    with path.open("w") as out:
        out.write("[")
        for number in range(pages):
            issues = [
                issue(
                    f"OPS-{number * per_page + i:06d}",
                    description=body,
                    created="2024-01-01T00:00:00.000+0000",
                    comment={"comments": [{"body": body, "created": "2024-01-01T01:00:00.000+0000"}] * 2},
                )
                for i in range(per_page)
            ]
            out.write(("," if number else "") + json.dumps({"startAt": number * per_page, "issues": issues}))
        out.write("]")


def peak_while_reading(path):
    return read_and_peak(READER, path)


def test_memory_stays_flat_however_many_issues_the_file_holds(tmp_path):
    small, big = tmp_path / "small.json", tmp_path / "big.json"
    write_big_export(small, pages=2, per_page=50)
    write_big_export(big, pages=60, per_page=50)
    small_count, small_peak = peak_while_reading(small)
    big_count, big_peak = peak_while_reading(big)
    assert (small_count, big_count) == (100, 3000)
    # Thirty times the issues, about the same peak: one issue is held at a time, never the file or a page.
    assert big_peak < small_peak * 1.5 + 200_000
    # The parser reads 64 KiB at a time; the peak is that batch of events and one record, not the file.
    assert big_peak < 3_000_000 < 5_000_000 < big.stat().st_size


def test_any_value_anywhere_in_an_issue_is_read_or_refused_never_raised():
    issue_ = json.loads((DATA / "search_pages.json").read_text())[0]["issues"][0]
    check_any_value_anywhere_is_read_or_refused(READER, issue_, "issues", essential=("key", "id", "fields"))


def test_a_number_beyond_64_bits_or_a_float_is_still_json(tmp_path):
    # yajl's float mode refused an integer past 2**63 as "integer overflow", failing the whole file.
    path = tmp_path / "page.json"
    path.write_text(
        '{"total": 123456789012345678901234567890, "issues": [{"key": "OPS-1", "id": 1e400, "fields": {}}]}'
    )
    (only,) = read(path)
    assert only.source_id == "OPS-1"


def test_a_table_row_whose_cells_are_not_a_list_is_a_row_without_cells():
    """Found by the shapes test above: a row's `content` of another type raised (a number is not iterable), and the
    whole issue was refused by the last-resort catch instead of read."""
    table = {"type": "table", "content": [
        {"type": "tableRow", "content": [{"type": "tableHeader", "content": [
            {"type": "paragraph", "content": [{"type": "text", "text": "Time"}]}]}]},
        {"type": "tableRow", "content": 1},
        {"type": "tableRow", "content": {"type": "tableCell"}},
    ]}  # fmt: skip
    assert to_markdown({"type": "doc", "content": [table]}) == "| Time |\n| --- |\n|  |\n|  |"
