"""Shared fixtures: a real store per test (parametrized over backends), the prepared local model."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from grandbo.config import Settings
from grandbo.embeddings.prepare import is_prepared
from grandbo.memory import OrgMemory
from grandbo.service import Grandbo

BACKENDS = ["sqlite"]


def _model_dir() -> Path:
    configured = os.environ.get("GRANDBO_LOCAL_MODEL_DIR")
    if configured:
        return Path(configured).expanduser()
    home = Path(os.environ.get("GRANDBO_HOME", "~/.grandbo")).expanduser()
    return home / "models" / "all-MiniLM-L6-v2"


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The prepared local model (`make setup` prepares it); tests that need it fail loudly without it."""
    path = _model_dir()
    if not is_prepared(path):
        pytest.fail(f"the local model is not prepared in {path}: run `make setup` (grandbo models prepare)")
    return path


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reads the developer's GRANDBO_* settings or writes to their home."""
    for key in list(os.environ):
        if key.startswith("GRANDBO_") and key != "GRANDBO_LOCAL_MODEL_DIR":
            monkeypatch.delenv(key)
    monkeypatch.setenv("GRANDBO_HOME", str(tmp_path / "home"))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings(tmp_path: Path, backend: str) -> Settings:
    return Settings(home=tmp_path / "home", local_model_dir=_model_dir())


@pytest.fixture
def grandbo(settings: Settings) -> Iterator[Grandbo]:
    with Grandbo.init(settings, embedding="deterministic") as opened:
        yield opened


@pytest.fixture
def memory(grandbo: Grandbo) -> OrgMemory:
    return grandbo.org("acme")
