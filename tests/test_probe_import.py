"""Hostile and sloppy exports sent to `import-from` (the readers, the importer, the REST route): each is one error
or a refusal that says what to do, never a 500, a traceback or a server that runs out of memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grandbo.errors import ImportFormatError
from grandbo.history.importer import import_history
from grandbo.history.record import HistoricIncident, Refusal
from grandbo.history.registry import reader
from grandbo.history.sources import _pages
from grandbo.history.sources.csv_table import CSV
from grandbo.history.sources.tabular import JSONL
from tests.history_shapes import read_and_peak
from tests.serving import serving

PAGE_KEYS = {
    "pagerduty": "incidents",
    "opsgenie": "data",
    "jira": "issues",
    "incidentio": "incidents",
    "rootly": "data",
}
JSON_READERS = list(PAGE_KEYS)


@pytest.mark.parametrize("source", JSON_READERS)
def test_json_nested_past_any_export_is_one_error_not_memory_square_in_the_depth(source, tmp_path):
    # ijson.parse kept every open level's prefix: 100,000 `[` took gigabytes and the server died. 3,000 levels show
    # the bound without it (the old walk read them and said nothing of the nesting).
    path = tmp_path / "deep.json"
    path.write_bytes(b"[" * 3000 + b"]" * 3000)
    with pytest.raises(ImportFormatError, match="nested deeper than"):
        list(reader(source).read(path))
    inside = tmp_path / "inside.json"  # deep inside one record, after a good one: the good one is kept
    inside.write_bytes(
        b'{"incidents": [{"id": "A", "title": "a"}, {"id": "B", "x": ' + b"[" * 3000 + b"]" * 3000 + b"}]}"
    )
    found = list(reader("pagerduty").read(inside))
    assert [type(item).__name__ for item in found][-1] == "Refusal" and "nested deeper" in found[-1].reason


def test_a_csv_that_is_not_utf8_is_one_error_saying_to_convert_it(memory, tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes("id,title\n1,caf\xe9 down\n".encode("latin-1"))
    with pytest.raises(ImportFormatError, match="iconv"):
        import_history(memory, reader("csv"), path)


def test_a_csv_that_stops_being_utf8_keeps_the_rows_before_and_refuses_the_rest(memory, tmp_path):
    path = tmp_path / "half.csv"
    good = "".join(f"{n},outage {n}\n" for n in range(1000)).encode()  # past the decoder's first block
    path.write_bytes(b"id,title\n" + good + b"9999,caf\xe9\n")
    report = import_history(memory, reader("csv"), path)
    assert report.imported >= 1 and len(report.refused) == 1
    assert "UTF-8" in report.refused[0]["reason"] and report.refused[0]["location"].startswith("after row")


def test_a_csv_field_over_the_limit_is_refused_not_a_traceback(memory, tmp_path):
    path = tmp_path / "big.csv"
    path.write_bytes(b'id,title,postmortem\n1,ok,short\n2,big,"' + b"x" * (17 << 20) + b'"\n')
    report = import_history(memory, reader("csv"), path)
    assert report.imported == 1 and len(report.refused) == 1 and "over the 16,777,216" in report.refused[0]["reason"]


def test_a_jsonl_line_over_the_limit_is_refused_unheld_and_the_lines_after_it_are_imported(tmp_path):
    # One line of a 300 MB upload took 766 MB of the server's memory (the bytes, the text, the parsed value); a
    # gigabyte's line three. It is read past now, in blocks.
    path = tmp_path / "long.jsonl"
    with path.open("wb") as out:
        out.write(b'{"id": "1", "title": "ok"}\n{"id": "2", "notes": ["' + b"x" * (48 << 20) + b'"]}\n')
        out.write(b'{"id": "3", "title": "after"}\n')
    count, peak = read_and_peak(JSONL, path)
    assert count == 2 and peak < 40 << 20  # the line is 48 MiB
    refused = [item for item in JSONL.read(path) if isinstance(item, Refusal)]
    assert [r.location for r in refused] == ["line 2"] and "50,331,6" in refused[0].reason
    assert "over the 16,777,216" in refused[0].reason


def test_a_csv_row_of_many_large_cells_is_refused_unheld_and_the_rows_before_are_imported(tmp_path):
    # Each cell under the csv module's field limit, the row four times it: the row was held whole.
    path = tmp_path / "wide.csv"
    with path.open("wb") as out:
        out.write(b"id,title,a,b,c,d\n1,ok,,,,\n2,wide")
        for _ in range(4):
            out.write(b',"' + b"x" * (15 << 20) + b'"')
        out.write(b"\n3,after,,,,\n")
    count, peak = read_and_peak(CSV, path)
    assert count == 1 and peak < 40 << 20  # the row is 60 MiB
    refused = [item for item in CSV.read(path) if isinstance(item, Refusal)]
    assert len(refused) == 1 and "over the 16,777,216" in refused[0].reason and "rows before" in refused[0].reason


def _page(path: Path, source: str, extras: list[object]) -> Path:
    """One page of `source`'s records, one for each of `extras` (in its field `x`), each one every reader reads."""
    fields = {"key": "K-1", "fields": {"summary": "s"}, "attributes": {"title": "t"}}  # what jira, rootly need
    fields |= {"title": "t", "name": "n", "message": "m"}  # what marks pagerduty's, incident.io's, opsgenie's records
    path.write_text(json.dumps({PAGE_KEYS[source]: [{"id": f"R{n}", **fields, "x": x} for n, x in enumerate(extras)]}))
    return path


def _kinds(found: list[object]) -> list[str]:
    return [type(item).__name__ for item in found]


@pytest.mark.parametrize("source", JSON_READERS)
def test_a_json_record_over_the_limit_is_refused_and_the_records_around_it_are_read(source, tmp_path, monkeypatch):
    # Fails on the old walk: every record was built whole, however large. The limit is made 1 MiB to keep the file
    # small; the bytes are counted as read, a block (64 KiB) at a time, so the two records are 128 KiB either side.
    monkeypatch.setattr(_pages, "MAX_RECORD", 1 << 20)
    block = "x" * (64 << 10)
    path = _page(tmp_path / "page.json", source, ["first", [block] * 14, [block] * 18, "after"])
    found = list(reader(source).read(path))
    assert _kinds(found) == ["HistoricIncident", "HistoricIncident", "Refusal", "HistoricIncident"], found
    assert found[2].location.endswith("[2]") and found[2].reason.startswith("the record is about 1,1")
    assert "over the 1,048,576 bytes or 2,000,000 values a record may be" in found[2].reason
    assert "cut what it holds" in found[2].reason


def test_a_json_record_of_too_many_values_is_refused_however_few_its_bytes(tmp_path, monkeypatch):
    # 16 MiB of `[],` is 11 million values: 360 MB built, where 16 MiB of a real export is 2 million at most.
    monkeypatch.setattr(_pages, "MAX_VALUES", 1000)
    path = _page(tmp_path / "page.json", "pagerduty", [[[]] * 400, [[]] * 600])
    found = list(reader("pagerduty").read(path))
    assert _kinds(found) == ["HistoricIncident", "Refusal"]
    assert "values, over the 16,777,216 bytes or 1,000 values a record may be" in found[1].reason


def test_a_json_record_over_16_mib_is_refused_unbuilt_and_the_others_are_imported(memory, tmp_path):
    # The probe's PagerDuty incident with 40 MB in one field took 1.1 GB of the server's memory and 24 s to import
    # (2.5 GB at 100 MB, and the route takes 1 GiB); through the reader alone, 859 MB at peak (tracemalloc), 66 MB
    # now. This one of 40 MiB in strings is built to the limit, then read past: the old walk held it whole.
    block = "x" * (1 << 20)
    path = _page(tmp_path / "big.json", "pagerduty", ["first", [block] * 40, "after"])
    count, peak = read_and_peak(reader("pagerduty"), path)
    assert count == 2 and peak < 20 << 20, peak  # 17.9 MB measured
    report = import_history(memory, reader("pagerduty"), path)
    assert report.imported == 2 and [r["location"] for r in report.refused] == ["incidents[1]"]
    assert "over the 16,777,216 bytes or 2,000,000 values a record may be" in report.refused[0]["reason"]


def test_one_json_value_over_the_limit_ends_the_read_there_keeping_the_records_before(tmp_path, monkeypatch):
    # The parser holds a value whole until it ends (a 40 MB string took 41 MB traced, more in the parser's buffer):
    # the reading stops there instead, and says so.
    monkeypatch.setattr(_pages, "MAX_RECORD", 1 << 20)
    path = _page(tmp_path / "long.json", "pagerduty", ["first", "x" * (4 << 20), "after"])
    count, peak = read_and_peak(reader("pagerduty"), path)
    assert count == 1 and peak < 2 << 20, peak
    found = list(reader("pagerduty").read(path))
    assert _kinds(found) == ["HistoricIncident", "Refusal"] and found[1].location == "incidents[1]"
    assert "over 1,048,576 bytes in one value" in found[1].reason and "the rest were not" in found[1].reason
    assert isinstance(found[0], HistoricIncident) and found[0].source_id == "R0"


def test_a_jsonl_line_that_is_not_utf8_is_refused_saying_to_convert_it(memory, tmp_path):
    # Failed before: json.loads guessed UTF-16 and the refusal said "'utf-16-le' codec can't decode...".
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"id": "1", "title": "ok"}\n' + '{"id": "2", "title": "caf\xe9 down"}\n'.encode("latin-1"))
    report = import_history(memory, reader("jsonl"), path)
    assert report.imported == 1 and len(report.refused) == 1
    refused = report.refused[0]
    assert refused["location"] == "line 2" and "codec" not in refused["reason"]
    assert refused["reason"].startswith("not UTF-8 (byte 0xe9 is not UTF-8)") and "iconv" in refused["reason"]


def test_a_jsonl_line_with_nan_or_infinity_is_refused_not_imported_as_text(memory, tmp_path):
    # Failed before (verify26's probe): Python's parser reads NaN and Infinity, which JSON does not have, so a title
    # of NaN became an incident and a memory titled "nan", and a start of Infinity an unknown date, exit 0.
    path = tmp_path / "nan.jsonl"
    path.write_text('{"id": "1", "title": "checkout down"}\n{"id": "2", "title": NaN}\n'
                    '{"id": "3", "title": "db slow", "started_at": -Infinity}\n', encoding="utf-8")  # fmt: skip
    report = import_history(memory, reader("jsonl"), path)
    assert report.imported == 1 and [r["location"] for r in report.refused] == ["line 2", "line 3"]
    assert "NaN" in report.refused[0]["reason"] and "-Infinity" in report.refused[1]["reason"]
    assert "null" in report.refused[0]["reason"]  # what to write instead
    assert [entry.title for entry in memory.entries()] == ["checkout down"]


def test_a_jsonl_number_too_large_for_a_float_is_refused_not_imported_as_inf(memory, tmp_path):
    # Failed before (probe26): 1e400 is a JSON number Python reads as Infinity, so a title of 1e400 became a memory
    # titled "inf" and a summary of -1e400 the body "-inf", exit 0.
    path = tmp_path / "huge.jsonl"
    path.write_text('{"id": "1", "title": "checkout down"}\n{"id": "2", "title": 1e400}\n'
                    '{"id": "3", "title": "db slow", "summary": -1E+400}\n{"id": "4", "title": "ok", "x": 1.5e3}\n',
                    encoding="utf-8")  # fmt: skip
    report = import_history(memory, reader("jsonl"), path)
    assert report.imported == 2 and [r["location"] for r in report.refused] == ["line 2", "line 3"]
    assert report.refused[0]["reason"].startswith("1e400 (too large for a number: it reads as Infinity)")
    assert "-1E+400" in report.refused[1]["reason"] and "null" in report.refused[1]["reason"]
    assert sorted(entry.title for entry in memory.entries()) == ["checkout down", "ok"]
    longer = tmp_path / "long.jsonl"
    longer.write_text('{"id": "5", "title": "t", "x": ' + "9" * 5000 + "}\n", encoding="utf-8")
    (refused,) = import_history(memory, reader("jsonl"), longer).refused
    assert "5,000 digits (valid JSON" in refused["reason"] and "a string" in refused["reason"]


def test_a_csv_column_longer_than_an_entry_is_refused_naming_the_column(memory, tmp_path):
    # Failed before: "body: String should have at most 200000 characters", naming neither the column nor a fix.
    path = tmp_path / "long.csv"
    path.write_text("id,title,body,cause\n1,ok,short,c\n2,long," + "x" * 200_001 + ",c\n3,c,s," + "y" * 200_001 + "\n")
    report = import_history(memory, reader("csv"), path)
    assert report.imported == 1 and [r["location"] for r in report.refused] == ["row 3", "row 4"]
    first, second = (r["reason"] for r in report.refused)
    assert first.startswith("column 'body' (read as postmortem) holds 200,001 characters, over the 200,000")
    assert "cut it" in first and "String should" not in first
    assert second.startswith("column 'cause' (read as cause)")


def test_a_post_mortem_longer_than_an_entry_from_any_reader_says_what_to_cut(memory, tmp_path):
    (tmp_path / "long.md").write_text("# Long outage\n\n## Summary\n\n" + "word " * 50_000)
    report = import_history(memory, reader("markdown"), tmp_path)
    (refused,) = report.refused
    assert "post-mortem holds" in refused["reason"] and "over the 200,000" in refused["reason"]
    assert "String should" not in refused["reason"]


def test_markdown_import_of_a_device_says_it_is_not_a_file_or_folder(cli):
    # Failed before: `import-from markdown /dev/zero` said "No such file or folder: /dev/zero".
    cli("orgs", "create", "acme")
    refused = cli("import-from", "markdown", "/dev/zero", "--org", "acme", code=2)
    assert "/dev/zero is not a regular file or folder" in refused.stderr and "No such" not in refused.stderr


@pytest.mark.parametrize("source", ["jsonl", "csv", "pagerduty"])
def test_import_of_a_device_is_refused_for_every_source(cli, source):
    # Failed before: /dev/null imported nothing and exited 0; /dev/zero as jsonl was read forever (not run here).
    cli("orgs", "create", "acme")
    refused = cli("import-from", source, "/dev/null", "--org", "acme", code=2)
    assert "/dev/null is not a regular file or folder" in refused.stderr


def test_rest_import_of_garbage_csv_and_deep_json_answers_422_and_the_server_lives(grandbo):
    memory = grandbo.org("acme", create=True)
    _, admin = memory.keys.create("admin")
    with serving(grandbo) as served, served.client(admin) as client:
        garbage = client.post("/v1/import-from/csv", content=b"\xff\xfe\xfa" * 100)
        assert garbage.status_code == 422 and "UTF-8" in garbage.json()["error"]["message"]
        deep = client.post("/v1/import-from/pagerduty", content=b"[" * 3000 + b"]" * 3000)
        assert deep.status_code == 422 and "nested deeper" in deep.json()["error"]["message"]
        assert client.post("/v1/import-from/jsonl", content=b'{"id": "x", "title": "t"}\n').status_code == 200


def test_rest_import_of_a_file_whose_name_is_too_long_for_a_file_system_is_a_422_not_a_500(grandbo):
    # 130 characters (the route takes up to 200) but 263 bytes: the upload's file could not be made (ENAMETOOLONG).
    memory = grandbo.org("acme", create=True)
    _, admin = memory.keys.create("admin")
    post_mortem = b"---\nid: pm-1\ntitle: DB failover\ndate: 2023-04-12\n---\n# DB failover\n"
    with serving(grandbo) as served, served.client(admin) as client:
        for name in ("\u00e9" * 130 + ".md", "\U0001f600" * 70 + ".md"):
            answer = client.post("/v1/import-from/markdown", params={"name": name}, content=post_mortem)
            assert answer.status_code == 422 and "over the 255" in answer.json()["error"]["message"]
        fits = client.post("/v1/import-from/markdown", params={"name": "\u00e9" * 120 + ".md"}, content=post_mortem)
        assert fits.status_code == 200 and fits.json()["imported"] == 1


@pytest.mark.parametrize(
    ("front", "said"),
    [("date: 0000-00-00", "cannot be read"), ("date: 2024-13-45", "cannot be read"),
     ("title: " + "[" * 5000 + "]" * 5000, "nested too deeply")],
)  # fmt: skip
def test_markdown_front_matter_yaml_cannot_hold_is_refused_by_its_file(front, said, tmp_path):
    (tmp_path / "bad.md").write_text(f"---\n{front}\n---\n# Outage\n\n## Summary\n\nThe database was down.\n")
    (tmp_path / "good.md").write_text("# Fine\n\n## Summary\n\nThe cache was cold.\n")
    found = list(reader("markdown").read(tmp_path))
    refused = [item for item in found if type(item).__name__ == "Refusal"]
    assert len(found) == 2 and len(refused) == 1 and refused[0].location == "bad.md" and said in refused[0].reason


def test_one_upload_at_a_time_per_organization_and_a_hang_up_is_no_500(grandbo):
    """`admit` reserved nothing: one admin key had eight 20 MiB uploads streaming at once (each may be 1 GiB) to
    the disk the stores share (a hostile probe). A second upload of the same org while one streams is a 429 with
    Retry-After; another org's goes on; a client hanging up mid-upload is logged as a 422, not a 500 with a
    traceback."""
    import select
    import socket
    import threading

    import httpx
    import structlog

    from grandbo.logs import configure

    keys = {org: grandbo.org(org, create=True).keys.create("admin")[1] for org in ("acme", "beta")}
    line = b'{"id": "INC-1", "title": "checkout-api pool exhausted after a deploy"}\n'
    rest = line.replace(b"INC-1", b"INC-2")
    configure("INFO")
    try:
        with structlog.testing.capture_logs() as logs, serving(grandbo) as served:

            def post(org: str, body: bytes) -> httpx.Response:
                return httpx.post(f"{served.url}/v1/import-from/jsonl", content=body, timeout=60,
                                  headers={"Authorization": f"Bearer {keys[org]}"})  # fmt: skip

            def upload_head(org: str, length: int) -> socket.socket:
                sock = socket.create_connection(("127.0.0.1", int(served.url.rsplit(":", 1)[1])), timeout=30)
                sock.sendall(f"POST /v1/import-from/jsonl HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {keys[org]}"
                             f"\r\nContent-Length: {length}\r\n\r\n".encode() + line)  # fmt: skip
                return sock

            streaming = upload_head("acme", len(line) + len(rest))  # its body half sent: it stays in
            for _ in range(200):  # until the server has it (a quick one may come first)
                if select.select([streaming], [], [], 0)[0]:  # answered: a quick one came first and it was refused
                    streaming.close()
                    streaming = upload_head("acme", len(line) + len(rest))
                second = post("acme", line)
                if second.status_code == 429:
                    break
                threading.Event().wait(0.02)
            other = post("beta", line)
            streaming.sendall(rest)
            first = b""
            while b'"refused_more"' not in first and (chunk := streaming.recv(65536)):
                first += chunk
            streaming.close()
            after = post("acme", line)
            upload_head("acme", 100_000).close()  # hangs up mid-upload
            for _ in range(100):
                if any(
                    entry.get("route") == "/v1/import-from/{source}" and entry.get("status") == 422 for entry in logs
                ):
                    break
                threading.Event().wait(0.05)
    finally:
        configure()
    assert second.status_code == 429 and int(second.headers["Retry-After"]) >= 1, second.text
    assert "already uploading" in second.json()["error"]["message"]
    assert other.status_code == 200 and after.status_code == 200
    assert first.startswith(b"HTTP/1.1 200") and b'"refused":[]' in first, first  # the held upload went on
    assert not [entry for entry in logs if entry["event"] == "http.unexpected_error"]
    assert [entry["status"] for entry in logs if entry.get("route") == "/v1/import-from/{source}"][-1] == 422


def test_a_jsonl_line_of_too_many_values_is_refused_unbuilt_and_the_others_are_imported(tmp_path):
    # 15 MB of `[],` (under the 16 MiB a line may be) is 5 million values: json.loads built them all, 340 MB.
    path = tmp_path / "dense.jsonl"
    dense = b'{"id": "2", "title": "dense", "notes": [' + b"[]," * 5_000_000 + b"[]]}\n"
    path.write_bytes(b'{"id": "1", "title": "ok"}\n' + dense + b'{"id": "3", "title": "after", "notes": ["a,b:[c"]}\n')
    count, peak = read_and_peak(JSONL, path)
    assert count == 2 and peak < 80 << 20  # the line itself is 15 MB, held as read
    refused = [item for item in JSONL.read(path) if isinstance(item, Refusal)]
    assert [r.location for r in refused] == ["line 2"]
    assert "at least 2,000,001 values, over the 2,000,000 values a line may hold" in refused[0].reason


def test_a_jsonl_line_of_many_commas_in_its_text_is_counted_and_imported(tmp_path):
    # Punctuation inside strings looks like values to the quick count; the exact one reads them as one string.
    path = tmp_path / "commas.jsonl"
    path.write_bytes(b'{"id": "1", "title": "commas", "raw": "' + b",:[" * 700_000 + b'"}\n')
    found = list(JSONL.read(path))
    assert _kinds(found) == ["HistoricIncident"]
