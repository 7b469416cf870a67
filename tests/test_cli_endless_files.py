"""Files the command line reads that have no end, or no seek (probe 27). `grandbo import /dev/zero` took 5 GB in
30 s, `grandbo catalog import /dev/zero` 7.6 GB, and went on: a line, or a file, was read whole before anything
looked at its size; on the machine that serves every organization. A named pipe (`grandbo import <(...)`) was
refused, "File or stream is not seekable.", because the first line was read twice."""

from __future__ import annotations

import os
import threading

import pytest

pytestmark = pytest.mark.embedded_default  # the command line's own reading: the same on both backends


def _sparse(path, size: int):  # type: ignore[no-untyped-def]
    """A file of `size` zero bytes that takes no room on the disk (as /dev/zero reads, but with an end)."""
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


def test_a_file_past_what_a_command_reads_is_refused_at_its_bound_not_read_whole(cli, tmp_path):
    """Failed before: the import read the 65 MiB line whole and refused it as an entry it could not read; the catalog
    and the alert were read whole (65 MiB) and refused as text they were not."""
    endless = _sparse(tmp_path / "one-line.jsonl", 65 << 20)
    whole = _sparse(tmp_path / "catalog.yaml", 65 << 20)
    imported = cli("import", str(endless), code=2)
    assert "line 1 has no end within 64 MiB: nothing was imported" in imported.stderr, imported.stderr
    for args in (
        ["catalog", "import", str(whole)],
        ["triage", str(whole)],
        ["triage", str(whole), "--source", "grafana"],
    ):
        refused = cli(*args, code=2)
        assert "holds more than 64 MiB, far more than this command reads" in refused.stderr, (args, refused.stderr)
    assert cli("stats", "--json").stdout.count('"total": 0') == 1  # nothing of the refused import was stored


def test_a_line_past_what_an_entry_holds_is_refused_unread_and_the_others_are_imported(cli, tmp_path):
    """A 9 MiB line (a log pasted into an entry) is refused as its line, read in pieces to its end and never whole,
    and the lines around it are imported. Failed before: the line was read whole and parsed."""
    path = tmp_path / "entries.jsonl"
    with path.open("wb") as handle:
        handle.write(b'{"title": "Eviction storm on redis-sessions", "kind": "finding"}\n{"title": "')
        handle.write(b"x" * (9 << 20))
        handle.write(b'"}\n{"title": "Second", "kind": "fact"}\n')
    result = cli("import", str(path), code=1)
    said = result.stdout + result.stderr
    assert "imported 2 entries" in said and "line 2" in said and "is over 8 MiB" in said and "skipped unread" in said
    assert cli("stats", "--json").stdout.count('"total": 2') == 1


def test_grandbo_import_reads_a_named_pipe(cli, tmp_path):
    """Failed before: "File or stream is not seekable." (the first line was read to look for an event log's header,
    then the file was read again from its start)."""
    pipe = tmp_path / "entries.jsonl"
    os.mkfifo(pipe)
    lines = b'{"title": "Eviction storm on redis-sessions", "body": "maxmemory reached", "kind": "finding"}\n' * 2
    writer = threading.Thread(target=pipe.write_bytes, args=(lines + b'{"title": "Second", "kind": "fact"}\n',))
    writer.start()
    result = cli("import", str(pipe))
    writer.join()
    assert "imported 2 entries" in result.stdout, (result.stdout, result.stderr)
