"""An export takes its file's place only once whole (probe 20b E1): `grandbo export` opened its file emptied and
wrote into it, so a run that died (a kill, a full disk, an error) left a cut file where yesterday's good export had
been, and a cut `--entries` export imported part of the org with exit 0. It is now written beside the file and
renamed over it at the end; whatever stops it leaves the file as it was and nothing beside it."""

from __future__ import annotations

import os
import stat

import pytest

from grandbo.memory import OrgMemory
from grandbo.model import NewEntry


class Stopped(BaseException):  # as Ctrl-C is: not an Exception
    pass


def _fill(memory: OrgMemory, n: int) -> None:
    memory.remember_many([NewEntry(id=f"e-{i}", title=f"checkout pool exhausted {i}", body="b") for i in range(n)])


def _files(folder):  # type: ignore[no-untyped-def]
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize(("whole_log", "stop"), [(False, RuntimeError("the store went away")), (True, Stopped())])
def test_an_export_stopped_halfway_leaves_the_last_good_one_whole_and_nothing_beside_it(
    memory, tmp_path, monkeypatch, stop, whole_log
):
    _fill(memory, 1_001)  # more than one chunk of vectors (1000 a read): the second read fails
    path = tmp_path / "out" / "org.jsonl"
    export = memory.export_log if whole_log else memory.export_file
    export(path)
    good = path.read_bytes()
    calls = []
    real = memory._entries.vectors if whole_log else memory.vectors

    def failing(ids):  # type: ignore[no-untyped-def]
        calls.append(len(ids))
        if len(calls) == 2:
            raise stop
        return real(ids)

    monkeypatch.setattr(memory._entries if whole_log else memory, "vectors", failing)
    memory.remember(NewEntry(id="e-new", title="a newer memory", body="b"))
    with pytest.raises(type(stop)):
        export(path)
    assert len(calls) == 2, "the export did not get to its second chunk: the test proves nothing"
    assert path.read_bytes() == good  # not a cut new one
    assert _files(path.parent) == ["org.jsonl"]


def test_an_export_replaces_the_file_owner_only_and_whole(memory, tmp_path):
    _fill(memory, 3)
    path = tmp_path / "out" / "org.jsonl"
    path.parent.mkdir()
    path.write_text("an older export\n")
    os.chmod(path, 0o644)
    assert memory.export_file(path) == 3
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_text().splitlines()) == 3 and _files(path.parent) == ["org.jsonl"]


def test_a_killed_runs_file_beside_the_export_is_removed_by_the_next_once_stale(memory, tmp_path):
    """Probe 20b: a kill -9 leaves `.NAME.*.partial` beside the export, and nothing removed it. The next export
    removes one untouched for STALE_PARTIAL_SECONDS, not one a running export may still be writing."""
    from grandbo.files import STALE_PARTIAL_SECONDS

    _fill(memory, 2)
    path = tmp_path / "out" / "org.jsonl"
    path.parent.mkdir()
    old, fresh, other = (path.parent / name for name in (".org.jsonl.a1.partial", ".org.jsonl.b2.partial",
                                                         ".other.jsonl.c3.partial"))  # fmt: skip
    for leftover in (old, fresh, other):
        leftover.write_text("cut")
    hour_ago = old.stat().st_mtime - STALE_PARTIAL_SECONDS - 60
    os.utime(old, (hour_ago, hour_ago))
    os.utime(other, (hour_ago, hour_ago))
    memory.export_file(path)
    assert _files(path.parent) == [".org.jsonl.b2.partial", ".other.jsonl.c3.partial", "org.jsonl"]


def test_an_export_to_a_link_replaces_the_file_it_names_and_keeps_the_link(memory, tmp_path):
    """Review 20: renaming over the path replaced a link `latest.jsonl -> real.jsonl` with a file of its own, the
    file it named left as it was, and the command said it had written it."""
    _fill(memory, 2)
    (tmp_path / "target").mkdir()
    (tmp_path / "links").mkdir()
    real = tmp_path / "target" / "real.jsonl"
    real.write_text("")
    link = tmp_path / "links" / "latest.jsonl"
    link.symlink_to("../target/real.jsonl")
    assert memory.export_file(link) == 2
    assert link.is_symlink() and len(real.read_text().splitlines()) == 2
