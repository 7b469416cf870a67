"""A REST import stops when the admin key it was started with is revoked (probe 24).

The key was checked once, when the request began: an import of 6,000 records over `POST /v1/import-from` filed
3,200 of them in the 6 s after `grandbo keys revoke` had answered, and was answered 200. Each chunk now reads the
key again before it is written; what was filed stays, and the same import run again with an active key resumes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from grandbo.api.uploads import FOLDER
from grandbo.errors import NotAuthorizedError
from grandbo.history.importer import CHUNK, HistoryReport
from grandbo.tiers.imported import Imported
from tests.serving import serving, until
from tests.test_history_import import MAP, ROW, run, write_jsonl

QUERY = "map=" + ",".join(f"{field}={column}" for field, column in MAP.items())
RECORDS = 3 * CHUNK


def _rows(count: int) -> list[dict[str, object]]:
    return [{**ROW, "id": f"INC-{n}"} for n in range(count)]


def test_an_import_whose_key_is_revoked_during_its_upload_files_nothing_and_says_so(grandbo):
    memory = grandbo.org("acme", create=True)
    record, admin = memory.keys.create("admin")
    body = "".join(json.dumps(row) + "\n" for row in _rows(RECORDS)).encode()
    uploads = grandbo.settings.home / FOLDER

    def upload() -> Iterator[bytes]:  # the key is revoked once half the export is in the server's upload file
        yield body[: len(body) // 2]
        until(lambda: any(path.stat().st_size for path in uploads.rglob("*.jsonl")), "the upload began")
        memory.keys.revoke(record.id)
        yield body[len(body) // 2 :]

    with serving(grandbo) as served, served.client(admin) as client:
        answer = client.post(f"/v1/import-from/jsonl?{QUERY}", content=upload())
    assert answer.status_code == 401, answer.text
    message = answer.json()["error"]["message"]
    assert "revoked" in message and "run the same import again with an active admin key" in message
    assert memory.incidents.find() == [] and memory.stats().total == 0  # nothing filed for a revoked key
    Imported(memory.incidents).check()  # and the org's import lease was given back: the next import may run


def test_an_import_stopped_between_chunks_keeps_what_it_filed_and_resumes(memory, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", _rows(RECORDS))

    def still(report: HistoryReport) -> None:  # as a REST import's check finds its key revoked after one chunk
        if report.imported:
            raise NotAuthorizedError("revoked")

    with pytest.raises(NotAuthorizedError):
        run(memory, path, still=still)
    again = run(memory, path)
    assert (again.imported, again.unchanged) == (RECORDS - CHUNK, CHUNK)
