"""What `import-from` says about exports it cannot read as they are (probe 20b, W2/I4 "import-from messages" and
"interrupted imports"): once for the file when the file is the problem, at the line (and column) when a record is,
under the name the export gives a field, and how far an import stopped by Ctrl-C got. Each failed before its fix."""

from __future__ import annotations

import codecs
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandbo.cli import app
from grandbo.errors import ImportFormatError
from grandbo.history.importer import import_history
from grandbo.history.record import HistoricIncident, Refusal
from grandbo.history.registry import reader
from grandbo.history.stopped import Interrupted
from grandbo.service import Grandbo
from tests.serving import serving

pytestmark = pytest.mark.timeout(180)

DATA = Path(__file__).parent / "data" / "history"
RECORDS = [
    {"id": "1", "title": "café checkout down", "started_at": "2024-01-01T00:00:00Z"},
    {"id": "2", "title": "ledger replica lag", "started_at": "2024-01-02T00:00:00Z"},
    {"id": "3", "title": "search index stale", "started_at": "2024-01-03T00:00:00Z"},
]


def _read(source: str, path: Path) -> list[HistoricIncident | Refusal]:
    return [item for item in reader(source).read(path) if isinstance(item, HistoricIncident | Refusal)]


def _refused(found: list[HistoricIncident | Refusal]) -> list[tuple[str, str]]:
    return [(item.location, item.reason) for item in found if isinstance(item, Refusal)]


def test_a_utf16_export_with_its_mark_is_read_as_utf16(memory, tmp_path):
    # Windows PowerShell's `>` writes UTF-16 LE with a mark and CRLF; it was refused line by line ("line 1: not
    # UTF-8", then "not a JSON object" for every other line), and nothing was imported.
    lines = tmp_path / "powershell.jsonl"
    lines.write_bytes("".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in RECORDS).encode("utf-16"))
    report = import_history(memory, reader("jsonl"), lines)
    assert (report.imported, report.refused) == (3, [])
    assert "café checkout down" in {entry.title for entry in memory.entries()}
    table = tmp_path / "excel.csv"  # UTF-16 BE too, with its mark
    table.write_bytes("\ufeffid,title\r\n7,naïve retry storm\r\n".encode("utf-16-be"))
    assert [(i.source_id, i.title) for i in _read("csv", table)] == [("7", "naïve retry storm")]


def test_utf16_without_a_mark_is_one_error_and_half_a_character_refuses_its_line_only(tmp_path):
    unmarked = tmp_path / "unmarked.jsonl"
    unmarked.write_bytes("".join(json.dumps(r) + "\n" for r in RECORDS).encode("utf-16-le"))
    with pytest.raises(ImportFormatError, match=r"unmarked\.jsonl looks like UTF-16 without a byte order mark"):
        _read("jsonl", unmarked)
    broken = tmp_path / "broken.jsonl"  # a lone surrogate on line 2, and an odd byte at the end
    text = "".join(json.dumps(r) + "\n" for r in RECORDS).replace("ledger", "\ud800ledger")
    broken.write_bytes(text.encode("utf-16", "surrogatepass") + b"\x00")
    found = _read("jsonl", broken)
    assert [i.source_id for i in found if isinstance(i, HistoricIncident)] == ["1", "3"]
    (second, end) = _refused(found)
    assert second[0] == "line 2" and second[1].startswith("not UTF-16 text: it holds half a character")
    assert end[0] == "line 4" and "ends inside a character" in end[1]


@pytest.mark.parametrize(
    "written",
    [lambda records: json.dumps(records), lambda records: json.dumps(records, indent=2)],
    ids=["one_line", "pretty"],
)
def test_a_json_array_given_as_jsonl_is_one_error_saying_how_to_convert_it(written, tmp_path):
    # Was "line 1: not a JSON object but list", or, pretty-printed, one refusal a line (17 for three records).
    path = tmp_path / "incidents.jsonl"
    path.write_text(written(RECORDS) + "\n", encoding="utf-8")
    with pytest.raises(ImportFormatError) as caught:
        _read("jsonl", path)
    said = caught.value.message
    assert said.startswith("incidents.jsonl is one JSON array, not JSON lines")
    assert "`jq -c '.[]' incidents.jsonl > incidents-lines.jsonl`" in said


def test_a_json_object_over_many_lines_given_as_jsonl_is_one_error(tmp_path):
    path = tmp_path / "page.jsonl"
    path.write_text(json.dumps({"incidents": RECORDS}, indent=2), encoding="utf-8")
    with pytest.raises(ImportFormatError, match="one JSON object written over many lines") as caught:
        _read("jsonl", path)
    assert "jq -c '.KEY[]' page.jsonl" in caught.value.message and "pagerduty" in caught.value.message


def test_a_jsonl_line_nested_too_deeply_says_so_and_the_others_are_read(tmp_path):
    # Was "not a JSON object: maximum recursion depth exceeded while decoding a JSON array from a unicode string".
    path = tmp_path / "deep.jsonl"
    deep = '{"id": "9", "title": "t", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    path.write_text("\n".join([json.dumps(RECORDS[0]), deep, "[1, 2]", '"text"']) + "\n", encoding="utf-8")
    found = _read("jsonl", path)
    assert [i.source_id for i in found if isinstance(i, HistoricIncident)] == ["1"]
    (nested, array, string) = _refused(found)
    assert nested[0] == "line 2" and nested[1].startswith("nested too deeply to read")
    assert "recursion" not in nested[1]
    assert array == ("line 3", "a JSON array, not an object (one incident's object a line)")
    assert string == ("line 4", "a string, not a JSON object (one incident a line)")


@pytest.mark.parametrize(("separator", "named"), [(";", "`;`-separated"), ("\t", "tab-separated")])
def test_a_csv_separated_by_another_character_is_one_error_naming_it(separator, named, tmp_path):
    # Was "row 2: no id (column 'id' is empty or absent)" for every row.
    path = tmp_path / "excel.csv"
    path.write_text(separator.join(["id", "title", "date"]) + "\n" + separator.join(["1", "a", "2024-01-01"]) + "\n")
    with pytest.raises(ImportFormatError) as caught:
        _read("csv", path)
    assert caught.value.message.startswith(
        f"excel.csv's header is one column {separator.join(['id', 'title', 'date'])!r}"
    )
    assert named in caught.value.message and "comma-separated" in caught.value.message


def test_a_csv_quote_left_open_is_refused_at_its_line_not_read_into_the_rest(memory, tmp_path):
    # Read leniently, the open quote took in the rest of the file as one title, and the import said nothing (exit 0).
    path = tmp_path / "quote.csv"
    path.write_text('id,title,date\n1,ok,2024-01-01\n2,"outage,2024-01-02\n3,db,2024-01-03\n4,x,2024-01-04\n')
    report = import_history(memory, reader("csv"), path)
    assert report.imported == 1 and [r["location"] for r in report.refused] == ["line 3"]
    assert "is not closed where its field ends: the field runs on to the end of the file" in report.refused[0]["reason"]
    assert [entry.title for entry in memory.entries()] == ["ok"]
    stray = tmp_path / "stray.csv"
    stray.write_text('id,title\n1,"abc" d\n2,ok\n')
    (refused,) = _refused(_read("csv", stray))
    assert refused[0] == "line 2" and refused[1].startswith("a quoted field is followed by more text before its comma")


def test_a_csv_row_with_more_values_than_the_header_is_refused_alone(tmp_path):
    # Read leniently, the values past the header's columns were dropped, and the import said nothing.
    path = tmp_path / "extra.csv"
    path.write_text("id,title,date\n1,checkout down, again,2024-01-01\n2,db,2024-01-02\n3,x,2024-01-03,,\n")
    found = _read("csv", path)
    assert [i.source_id for i in found if isinstance(i, HistoricIncident)] == ["2", "3"]  # empty cells past: kept
    ((where, why),) = _refused(found)
    assert where == "row 2" and why.startswith("4 values where the header names 3 columns: a value holding a comma")


def test_a_vendor_json_that_breaks_says_at_which_line_and_column(tmp_path):
    # Was "the file stops being JSON here (lexical error: invalid char in json text.)", with no position.
    path = tmp_path / "pd.json"
    path.write_text('{"incidents": [{"id": "P1", "title": "a"},\n {"id": "P2", "title": NaN}]}')
    (_, refused) = _read("pagerduty", path)
    assert isinstance(refused, Refusal) and refused.location == "incidents[1]"
    assert refused.reason.startswith("the file stops being JSON at line 2, column 24 (NaN: JSON has no such number)")
    assert refused.reason.endswith("write null or a string there")
    first = tmp_path / "first.json"
    first.write_text('{"incidents": [{"id": "P1", "title": "a", "x": [1, 2,}]}')
    with pytest.raises(ImportFormatError, match=r"first.json is not JSON at line 1, column 54 \(parse error"):
        _read("pagerduty", first)


VENDOR_EXPORTS = [("pagerduty", "pagerduty/incidents_page.json"), ("opsgenie", "opsgenie/alerts_list.json"),
                  ("jira", "jira/search_pages.json"), ("incidentio", "incidentio/incidents_pages.jsonl"),
                  ("rootly", "rootly/incidents_pages.json")]  # fmt: skip
MARKED = {"utf-8 with a mark": lambda text: codecs.BOM_UTF8 + text.encode(), "utf-16": lambda text: text.encode("utf-16"),
          "utf-16-be": lambda text: codecs.BOM_UTF16_BE + text.encode("utf-16-be"),
          "utf-32": lambda text: text.encode("utf-32")}  # fmt: skip


@pytest.mark.parametrize(("source", "export"), VENDOR_EXPORTS)
def test_a_vendor_json_export_with_a_byte_order_mark_is_read_in_its_encoding(source, export, tmp_path):
    # Failed before: "not JSON at line 1, column 1 (lexical error: invalid char in json text.)", for a UTF-8 file
    # with a mark as for the UTF-16 Windows PowerShell 5.1 writes; csv and jsonl were read in their encoding.
    original = DATA / export
    expected = [item.model_dump() for item in _read(source, original)]
    assert sum(bool(item.get("source_id")) for item in expected) >= 2
    for encoding, encode in MARKED.items():
        path = tmp_path / f"{encoding}{original.suffix}"
        path.write_bytes(encode(original.read_text(encoding="utf-8")))
        assert [item.model_dump() for item in _read(source, path)] == expected, encoding


def test_a_marked_vendor_export_through_the_rest_route_and_its_broken_encodings(grandbo, tmp_path):
    memory = grandbo.org("acme", create=True)
    _, admin = memory.keys.create("admin")
    text = (DATA / "pagerduty/incidents_page.json").read_text(encoding="utf-8")
    with serving(grandbo) as served, served.client(admin) as client:
        answer = client.post("/v1/import-from/pagerduty", content=text.encode("utf-16"))
    assert answer.status_code == 200 and (answer.json()["imported"], answer.json()["refused"]) == (4, []), answer.text
    marked = tmp_path / "mark.json"  # a byte order mark alone is an empty file, as whitespace is
    for alone in (codecs.BOM_UTF8, " \r\n".encode("utf-16")):
        marked.write_bytes(alone)
        with pytest.raises(ImportFormatError, match=r"mark\.json is empty: export the incidents"):
            _read("pagerduty", marked)
    marked.write_bytes(text.encode("utf-16") + b"\x00")  # cut inside a character: the records before it are read
    *read, last = _read("pagerduty", marked)
    assert len(read) == 4 and isinstance(last, Refusal)
    assert last.reason.startswith("the file stops being UTF-16 text at its end, inside a character; what came before")
    wide = text.encode("utf-32")  # a UTF-32 value past U+10FFFF before the second incident: the first is read
    at = wide.index("Search index lag".encode("utf-32-le"))
    marked.write_bytes(wide[:at] + (0x110000).to_bytes(4, "little") + wide[at:])
    (first, stopped) = _read("pagerduty", marked)
    assert isinstance(first, HistoricIncident) and isinstance(stopped, Refusal)
    assert stopped.reason.startswith(f"the file stops being UTF-32 text near byte {at:,} (code point not in range")


def test_the_place_json_breaks_is_found_past_the_parsers_first_blocks(tmp_path):
    records = [{"id": f"P{n}", "title": "é outage " * 5, "created_at": "2024-01-01T00:00:00Z"} for n in range(3000)]
    pretty = json.dumps({"incidents": records}, ensure_ascii=False, indent=1).replace('"P2500"', '"P2500", "x": NaN')
    line = pretty[: pretty.index("NaN")].count("\n") + 1
    column = pretty.index("NaN") - pretty.rfind("\n", 0, pretty.index("NaN"))
    path = tmp_path / "pretty.json"
    path.write_text(pretty, encoding="utf-8")
    refused = _read("pagerduty", path)[-1]
    assert isinstance(refused, Refusal) and f"at line {line}, column {column} (NaN" in refused.reason
    one_line = json.dumps({"incidents": records}, ensure_ascii=False).replace('"P2500"', '"P2500", "x": NaN')
    path.write_text(one_line, encoding="utf-8")  # the line began blocks before: its byte, not a column
    byte = one_line.encode().index(b"NaN") + 1
    assert f"at line 1, byte {byte:,} of that line (NaN" in _read("pagerduty", path)[-1].reason


def test_a_time_off_the_calendar_is_refused_under_the_exports_name_for_it(tmp_path):
    # Was "Invalid entry: occurred_at: Value error, ...": the entry's field, which no export has.
    off = "9999-12-31T23:59:59-05:00"
    table = tmp_path / "dates.csv"
    table.write_text(f"id,title,date,ended_at\n1,ok,2024-01-01,\n2,late,{off},\n3,end,2024-01-01,{off}\n")
    found = _read("csv", table)
    assert _refused(found) == [
        ("row 3", f"column 'date' (read as started_at): {off} falls outside the calendar in UTC; give a time in "
                  "years 1 to 9999"),
        ("row 4", f"column 'ended_at' (read as resolved_at): {off} falls outside the calendar in UTC; give a time in "
                  "years 1 to 9999"),
    ]  # fmt: skip
    page = tmp_path / "pd.json"
    page.write_text(json.dumps({"incidents": [{"id": "P1", "title": "a", "created_at": off}]}))
    assert _refused(_read("pagerduty", page))[0][1].startswith(f"created_at: {off} falls outside the calendar")
    folder = tmp_path / "postmortems"
    folder.mkdir()
    (folder / "late.md").write_text(f"---\ntitle: Outage\ndate: {off}\n---\n# Outage\n\n## Root cause\nbad\n")
    assert _refused(_read("markdown", folder)) == [
        ("late.md", f"the front matter's date: {off} falls outside the calendar in UTC; give a time in years 1 to 9999")
    ]


def _stop_after_first_chunk(done: int, total: int | None) -> None:
    raise KeyboardInterrupt


def test_an_import_stopped_by_ctrl_c_reports_what_it_filed_and_a_rerun_resumes(memory, tmp_path):
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps({"id": f"R{n}", "title": f"outage {n}"}) + "\n" for n in range(250)))
    with pytest.raises(Interrupted) as caught:
        import_history(memory, reader("jsonl"), path, progress=_stop_after_first_chunk)
    assert caught.value.report.imported == 100 and len(memory.entries()) == 100
    again = import_history(memory, reader("jsonl"), path)
    assert (again.imported, again.unchanged) == (150, 100)
    assert len(memory.entries()) == 250  # each record once


def _interruptible() -> None:
    """In the child before it runs: SIGINT's default action, and not blocked."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _signals(pid: int) -> str:
    """The process's signal masks as Linux shows them (for a failure's message)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as error:
        return f"no status ({error})"
    return ", ".join(line for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


def test_ctrl_c_on_import_from_says_how_far_it_got_and_how_to_resume(settings, tmp_path, monkeypatch):
    # Was exit 130 and nothing at all on stdout or stderr.
    with Grandbo.init(settings, embedding="deterministic") as grandbo:
        grandbo.org("acme", create=True)
    path = tmp_path / "many.jsonl"  # 10,000 lines: the progress lines (every tenth) say when it is under way
    path.write_text("".join(json.dumps({"id": f"R{n}", "title": f"outage {n}"}) + "\n" for n in range(10_000)))
    # Only this test's settings (none another test of this process left in its environment), and Ctrl-C as a
    # terminal delivers it (not ignored nor blocked as this process may have it).
    env = {name: value for name, value in os.environ.items() if not name.startswith("GRANDBO_")}
    env |= {"GRANDBO_HOME": str(settings.home), "PYTHONPATH": os.pathsep.join(sys.path)}
    if settings.database_url:
        env["GRANDBO_DATABASE_URL"] = settings.database_url
    command = [sys.executable, "-m", "grandbo", "import-from", "jsonl", str(path), "--org", "acme"]
    # At the lowest priority: on a loaded machine this process, waiting for the line, is run before the import ends.
    niced = ["nice", "-n", "19", *command]
    process = subprocess.Popen(niced, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_interruptible)  # fmt: skip
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if "of about 10000 records" in line:
            break
    state = _signals(process.pid)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    said = f"exit {process.returncode}; {state}; read first: {seen}; then: {err[-1500:]}; stdout: {out[-300:]}"
    assert process.returncode == 130, said
    said = err.strip().splitlines()[-1]
    assert said.startswith("interrupted after ") and "Traceback" not in err, err
    done = int(said.removeprefix("interrupted after ").split(" ")[0].replace(",", ""))
    assert 1000 <= done < 10_000 and f"(imported {done:,}, updated 0, unchanged 0, refused 0)" in said
    assert said.endswith("run the same command again to resume: the records already imported are found unchanged "
                         "and not written again")  # fmt: skip
    monkeypatch.setenv("GRANDBO_HOME", str(settings.home))  # the rerun in this process (no signal to send it)
    if settings.database_url:
        monkeypatch.setenv("GRANDBO_DATABASE_URL", settings.database_url)
    rerun = CliRunner().invoke(app, [*command[3:], "--dry-run", "--json"])
    assert rerun.exit_code == 0, rerun.stderr
    report = json.loads(rerun.stdout)
    assert (report["imported"], report["unchanged"]) == (10_000 - done, done)  # what the line said holds
