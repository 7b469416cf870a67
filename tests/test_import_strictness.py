"""What `import-from` refuses up front, or record by record, that it filed or refused misleadingly before (probe
30): a `--map` no record can be read through is one error naming the pair (a source an entry id can begin is no such
pair); a vendor JSON record naming a key twice is refused as a jsonl line is; a jsonl file whose lines end in a
carriage return alone is refused as one error naming that; a UTF-16 vendor export's lone surrogate ends no longer
the whole file, and bytes of no UTF-8 character are named for what they are. Each failed before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grandbo.errors import ImportFormatError, InvalidInputError
from grandbo.history.importer import import_history
from grandbo.history.record import HistoricIncident, Refusal
from grandbo.history.registry import reader
from tests.serving import serving

DATA = Path(__file__).parent / "data" / "history"

LINES = "".join(json.dumps({"id": f"I-{n}", "title": f"Disk full on db-{n}", "cause": "Log rotation was off"}) + "\n"
                for n in range(3))  # fmt: skip


def _read(source: str, path: Path, mapping: dict[str, str] | None = None) -> list[HistoricIncident | Refusal]:
    return [item for item in reader(source).read(path, mapping) if isinstance(item, HistoricIncident | Refusal)]


def test_a_mapping_no_record_can_be_read_through_is_one_422_naming_it(grandbo):
    # Failed before: 200, every record refused ("entry id 'a/b:I-0-f1' must start with a letter ...", 1,000 of
    # them listed on a large file).
    memory = grandbo.org("acme", create=True)
    _, admin = memory.keys.create("admin")
    with serving(grandbo) as served, served.client(admin) as client:
        refused = client.post("/v1/import-from/jsonl", params={"map": "source==a/b"}, content=LINES.encode())
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["message"].startswith("--map source==a/b: the source name 'a/b' must be 1 to 123 letters, digits")
        assert error["detail"]["field"] == "source"
        filed = client.post("/v1/import-from/jsonl", params={"map": "source==public"}, content=LINES.encode())
        assert filed.json()["imported"] == 3, filed.text
    assert memory.find("public:I-0-f1") is not None


@pytest.mark.parametrize(
    ("mapping", "said"),
    [
        ({"source": "=" + "s" * 124}, "must be 1 to 123 letters, digits, `.`, `_`, `:`, `@` or `-`"),
        ({"source": "=a\x00b"}, "the source name 'a\\\\x00b' must be"),
        ({"source": "=ops/acme"}, "the source name 'ops/acme' must be"),
        ({"source": "=-ops"}, "the source name '-ops' must be"),
        # was "no id (column '=' is empty or absent)" for every record
        ({"source_id": "="}, "--map source_id==: a value starting with `=` is one constant for every record"),
        ({"source_id": "=X"}, "each record needs its own id: name the column that holds it, source_id=COLUMN"),
        ({"source_id": ""}, "--map source_id=: names no column"),
        ({"title": "="}, "--map title==: the `=` after `title=` starts a constant, and none follows"),
    ],
)
def test_a_mapping_pair_no_record_can_be_read_through_is_refused_before_any_record(mapping, said, tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(LINES)
    with pytest.raises(InvalidInputError) as refused:
        _read("jsonl", path, mapping)
    assert said in refused.value.message


BAD_MAPS = [
    ("jsonl", "titel=title", "--map names an unknown field 'titel'; the fields are"),
    ("jsonl", "source==a/b", "--map source==a/b: the source name 'a/b' must be"),
    ("pagerduty", "title=summary", "The pagerduty source takes no --map (?map= over REST)"),
    ("markdown", "title=x", "The markdown source takes no --map (?map= over REST)"),
]


@pytest.mark.parametrize(("source", "mapping", "said"), BAD_MAPS)
def test_a_bad_map_is_refused_over_rest_before_anything_is_uploaded(source, mapping, said, grandbo):
    # Failed before: the map was read with the file, after its upload: the upload folder this home cannot make was
    # reached first (500 "Cannot keep the upload"), and a good home took the whole export before the 422.
    memory = grandbo.org("acme", create=True)
    _, admin = memory.keys.create("admin")
    grandbo.settings.home.mkdir(parents=True, exist_ok=True)
    (grandbo.settings.home / "uploads").write_text("not a folder")  # any upload would fail
    with serving(grandbo) as served, served.client(admin) as client:
        params = {"map": mapping} | ({"name": "a.md"} if source == "markdown" else {})
        refused = client.post(f"/v1/import-from/{source}", params=params, content=LINES.encode())
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["message"].startswith(said)


@pytest.mark.parametrize(("source", "mapping", "said"), BAD_MAPS)
def test_a_bad_map_is_refused_by_the_cli_before_the_store_is_written(source, mapping, said, cli, tmp_path):
    # Failed before: the CLI took the org's import lease (two events in its history) before the map was read.
    from grandbo.config import Settings
    from grandbo.service import Grandbo
    from grandbo.tiers.imported import HISTORY, RUNNING

    path = tmp_path / ("a.md" if source == "markdown" else "a.jsonl")
    path.write_text(LINES)
    printed = cli("import-from", source, str(path), "--map", mapping, code=2)
    assert printed.stderr.startswith(f"error: {said}") and "Traceback" not in printed.stderr
    with Grandbo.open(Settings()) as grandbo:
        assert grandbo.org(None).incidents.documents.history(HISTORY, RUNNING) == []


@pytest.mark.parametrize("source", ["ops@acme", "a:b", "s" * 60, "s" * 123])
def test_a_source_an_entry_id_can_begin_imports_every_record(source, memory, tmp_path):
    # Failed before: 422 "the source name ... must be 1 to 52 letters, digits, `.`, `_` or `-`" for these, each of
    # which an entry id holds (`ops@acme:I-0-f1`), and imported every record before that check came.
    path = tmp_path / "a.jsonl"
    path.write_text(LINES.replace('"I-', '"'))  # ids "0", "1", "2": `s` * 123 + ":0-f1" is 128 characters
    report = import_history(memory, reader("jsonl"), path, mapping={"source": "=" + source})
    assert report.imported == 3 and not report.refused, report.refused
    assert memory.find(f"{source}:0-f1") is not None


def test_a_source_column_holding_no_source_name_refuses_that_record_naming_the_column(memory, tmp_path):
    # Failed before: refused as "entry id 'team a:I-1-f1' must ...", the entry's field, which no export has.
    path = tmp_path / "a.jsonl"
    rows = [{"id": "I-1", "title": "Disk full", "cause": "Log rotation was off", "team": "team a"},
            {"id": "I-2", "title": "Cron overlapped", "cause": "Two schedulers ran", "team": "payments"}]  # fmt: skip
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = import_history(memory, reader("jsonl"), path, mapping={"source": "team"})
    assert report.imported == 1 and [r["location"] for r in report.refused] == ["line 1"]
    assert report.refused[0]["reason"].startswith("column 'team' (read as source): the source name 'team a' must be")
    assert memory.find("payments:I-2-f1") is not None and memory.find("team a:I-1-f1") is None


def test_a_vendor_json_record_naming_a_key_twice_is_refused_naming_it_as_a_jsonl_line_is(tmp_path):
    # Failed before: the record was read with its last `id` ("E") and nothing said so; jsonl refused it.
    path = tmp_path / "pd.json"
    path.write_text(
        '{"incidents": [{"id": "D", "id": "E", "title": "Disk full"},'
        ' {"id": "F", "title": "Cron overlapped", "service": {"summary": "api", "summary": "web"}},'
        ' {"id": "G", "title": "Cert expired", "teams": [{"summary": "edge"}, {"summary": "core"}]}]}'
    )
    found = _read("pagerduty", path)
    assert [item.source_id for item in found if isinstance(item, HistoricIncident)] == ["G"]
    refused = [(item.location, item.reason) for item in found if isinstance(item, Refusal)]
    assert [where for where, _ in refused] == ["incidents[0]", "incidents[1]"]
    assert refused[0][1].startswith("names the key 'id' more than once in one object: the record would keep its last")
    assert "'summary'" in refused[1][1]  # a nested object's key too; the same key in two objects is no repeat
    lines = tmp_path / "a.jsonl"
    lines.write_text('{"id": "D", "id": "E", "title": "Disk full"}\n')
    assert [item.reason for item in _read("jsonl", lines) if isinstance(item, Refusal)] == [refused[0][1]]


def test_a_jsonl_file_whose_lines_end_in_a_carriage_return_alone_is_one_error_naming_it(tmp_path):
    # Failed before: "line 1: not a JSON object: Extra data: line 1 column 90 (char 89)", the cause unnamed.
    path = tmp_path / "mac.jsonl"
    path.write_bytes(LINES.replace("\n", "\r").encode())
    with pytest.raises(ImportFormatError) as refused:
        _read("jsonl", path)
    assert refused.value.message.startswith("mac.jsonl's lines end in a carriage return alone (classic Mac OS's line")
    assert "`tr '\\r' '\\n' < mac.jsonl > mac-lf.jsonl`" in refused.value.message
    path.write_bytes(LINES.replace("\n", "\r").encode("utf-16"))  # in any encoding
    with pytest.raises(ImportFormatError, match="carriage return alone"):
        _read("jsonl", path)
    for ends in ("\r\n", "\n"):  # Windows' and Unix's line ends, and a carriage return inside a line, are read
        path.write_bytes(LINES.replace(", ", ",\r ").replace("\n", ends).encode())
        assert [item.source_id for item in _read("jsonl", path)] == ["I-0", "I-1", "I-2"]


def test_a_lone_surrogate_in_a_utf16_vendor_export_is_read_as_its_json_escape_is(tmp_path):
    # Failed before: the whole file was one error ("is not JSON (a string in it holds half a character, a lone
    # surrogate ..."), no record read; now the string holding it is what the same file in UTF-8 with the escape
    # `\ud800` gives: a field of no text, read as absent (counted, `fields_ignored`), the records all read.
    text = (DATA / "pagerduty/incidents_page.json").read_text(encoding="utf-8")
    wide, escaped = tmp_path / "wide.json", tmp_path / "escaped.json"
    wide.write_bytes(text.replace("Checkout", "Check\ud800out", 1).encode("utf-16", "surrogatepass"))
    escaped.write_text(text.replace("Checkout", "Check\\ud800out", 1))
    read = _read("pagerduty", wide)
    assert len(read) == 4 and all(isinstance(item, HistoricIncident) for item in read)
    assert [item.model_dump() for item in read] == [item.model_dump() for item in _read("pagerduty", escaped)]
    assert sum(len(item.ignored) for item in read if isinstance(item, HistoricIncident)) == 1


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        (b"\xed\xa0\x80", "a string in it holds half a character, a lone surrogate"),
        (b"\xc0\x80", "a string in it holds bytes that are no UTF-8 character (invalid start byte, byte 0xc0)"),
        (b"\xf4\x90\x80\x80", "holds bytes that are no UTF-8 character (invalid continuation byte, byte 0xf4)"),
        (b"\xed\xa0\xbd\xed\xb8\x80", "holds a character as CESU-8 writes it (each half of a surrogate pair as 3"),
    ],
)
def test_bytes_of_no_utf8_character_in_a_vendor_export_are_named_for_what_they_are(bad, said, tmp_path):
    # Failed before: each was "half a character, a lone surrogate".
    text = (DATA / "pagerduty/incidents_page.json").read_text(encoding="utf-8")
    path = tmp_path / "pd.json"
    path.write_bytes(text.encode().replace(b"Checkout", b"Check" + bad + b"out", 1))
    with pytest.raises(ImportFormatError) as refused:
        _read("pagerduty", path)
    assert said in refused.value.message


@pytest.mark.parametrize("mark", [b"\xff\xfe", b"\xfe\xff", b"\xff\xfe\x00\x00"])
def test_a_vendor_export_holding_only_a_utf16_or_utf32_mark_is_empty(mark, tmp_path):
    # Failed before for UTF-16's: "not JSON at line 1, column 1".
    path = tmp_path / "pd.json"
    path.write_bytes(mark)
    with pytest.raises(ImportFormatError, match=r"pd\.json is empty: export the incidents"):
        _read("pagerduty", path)


@pytest.mark.parametrize("source", ["jsonl", "csv"])
def test_a_jsonl_or_csv_file_holding_only_a_utf16_mark_reads_as_an_empty_one(source, tmp_path):
    # Failed before: "line 1: not UTF-8 (byte 0xff ...)" (jsonl), "is not a UTF-8 CSV file" (csv).
    path = tmp_path / f"a.{source}"
    path.write_bytes(b"\xff\xfe")
    assert _read(source, path) == []
