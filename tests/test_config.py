"""GRANDBO_INDEX_MEMORY_MB follows the machine when it is not set: a quarter of the smaller of physical memory and
the process's cgroup limit (v2 `memory.max`, v1 `memory.limit_in_bytes`, read up from its own group), at least
256 MB; set, it always wins. The cgroup files are real files under a scratch root."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from grandbo.config import Settings
from grandbo.machine import INDEX_MEMORY_FLOOR_MB, cgroup_memory_limit, index_memory_default, physical_memory

GIB = 1 << 30
V1_NO_LIMIT = "9223372036854771712"  # what cgroup v1 writes for a group without a limit


def _cgroups(root: Path, membership: str, limits: dict[str, str]) -> Path:
    """A cgroup tree under `root`: each file (relative to `root`) holding its limit, and /proc/self/cgroup's
    lines; returns the membership file."""
    for name, value in limits.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(value + "\n")
    own = root.parent / "self-cgroup"
    own.write_text(membership)
    return own


def test_default_is_a_quarter_of_the_smaller_of_physical_memory_and_the_cgroup_limit():
    assert index_memory_default(64 * GIB, 4 * GIB) == (1024, "a quarter of 4096 MB of cgroup limit")
    assert index_memory_default(8 * GIB, 32 * GIB) == (2048, "a quarter of 8192 MB of physical memory")
    assert index_memory_default(24 * GIB, None) == (6144, "a quarter of 24576 MB of physical memory")
    assert index_memory_default(None, 2 * GIB)[0] == 512


def test_default_never_goes_under_the_floor():
    mb, source = index_memory_default(16 * GIB, 512 << 20)  # a 512 MB container: a quarter would be 128 MB
    assert mb == INDEX_MEMORY_FLOOR_MB == 256
    assert source.startswith("floor")
    assert index_memory_default(1 * GIB, None)[0] == 256  # at 1 GiB the quarter and the floor meet


def test_default_without_any_reading_is_the_former_fixed_one():
    assert index_memory_default(None, None) == (1024, "machine memory unknown")


def test_cgroup_v2_limit_is_read_from_the_process_group_up(tmp_path):
    root = tmp_path / "cgroup"
    own = _cgroups(root, "0::/system.slice/grandbo.service\n",
                   {"system.slice/grandbo.service/memory.max": str(3 * GIB), "system.slice/memory.max": "max"})  # fmt: skip
    assert cgroup_memory_limit(root, own) == 3 * GIB
    (root / "system.slice/memory.max").write_text(f"{GIB}\n")  # a parent's smaller limit binds its children
    assert cgroup_memory_limit(root, own) == GIB


def test_cgroup_v2_container_reads_its_own_root(tmp_path):
    """In a container with its own cgroup namespace /proc/self/cgroup says `0::/` and the limit sits at the root."""
    root = tmp_path / "cgroup"
    own = _cgroups(root, "0::/\n", {"memory.max": str(GIB)})
    assert cgroup_memory_limit(root, own) == GIB
    (root / "memory.max").write_text("max\n")
    assert cgroup_memory_limit(root, own) is None


def test_cgroup_v1_limit_and_its_no_limit_value(tmp_path):
    root = tmp_path / "cgroup"
    own = _cgroups(root, "9:name=systemd:/\n4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n",
                   {"memory/memory.limit_in_bytes": V1_NO_LIMIT,
                    "memory/docker/abc/memory.limit_in_bytes": V1_NO_LIMIT})  # fmt: skip
    assert cgroup_memory_limit(root, own) is None  # 2^63 rounded to a page: no limit
    (root / "memory/docker/abc/memory.limit_in_bytes").write_text(str(2 * GIB))
    assert cgroup_memory_limit(root, own) == 2 * GIB


def test_no_cgroup_files_is_no_limit(tmp_path):
    assert cgroup_memory_limit(tmp_path / "absent", tmp_path / "absent-self-cgroup") is None
    root = tmp_path / "cgroup"
    own = _cgroups(root, "garbage line\n\n0::/gone\n", {"memory.max": "not a number"})
    assert cgroup_memory_limit(root, own) is None


def test_unset_setting_follows_this_machine(monkeypatch):
    monkeypatch.delenv("GRANDBO_INDEX_MEMORY_MB", raising=False)
    settings = Settings()
    assert settings.index_memory_mb == index_memory_default(physical_memory(), cgroup_memory_limit())[0]
    assert settings.index_memory_mb >= INDEX_MEMORY_FLOOR_MB
    source = settings.index_memory_source()
    assert source.startswith(("a quarter of", "floor")), source
    # Read apart from the code under test, which asks sysconf: the kernel's MemTotal in /proc/meminfo (the same
    # figure on Linux) bounds it, and it is a quarter of it where physical memory is what binds.
    total_mb = int(re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text())[1]) // 1024
    assert settings.index_memory_mb <= max(INDEX_MEMORY_FLOOR_MB, total_mb * 1.05 / 4)
    if "physical memory" in source and not source.startswith("floor"):
        assert settings.index_memory_mb == pytest.approx(total_mb / 4, rel=0.05)


def test_explicit_setting_wins_over_the_machine(monkeypatch):
    monkeypatch.setenv("GRANDBO_INDEX_MEMORY_MB", "64")  # under the floor: the operator's word still stands
    settings = Settings()
    assert settings.index_memory_mb == 64
    assert settings.index_memory_source() == "GRANDBO_INDEX_MEMORY_MB"
    assert settings.at_home(Path("/elsewhere")).index_memory_mb == 64
    assert Settings(index_memory_mb=4096).index_memory_source() == "GRANDBO_INDEX_MEMORY_MB"
    monkeypatch.setenv("GRANDBO_INDEX_MEMORY_MB", "0")
    with pytest.raises(ValidationError):
        Settings()
