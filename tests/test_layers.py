"""The directions that never exist (docs/architecture.md), read from the package's own imports.

Every import counts: at the top of a module, inside a function, under TYPE_CHECKING, relative or absolute.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grandbo

PACKAGE = Path(grandbo.__file__).parent

INTERFACES = ("grandbo.cli", "grandbo.api", "grandbo.mcp", "grandbo.web")
# (who, what it must never import, why)
FORBIDDEN = [
    (("grandbo.tiers",), ("grandbo.store",), "tiers use the org-bound handle and its repositories"),
    (INTERFACES, ("grandbo.store",), "interfaces act through the org-bound handle"),
    (("grandbo.eval",), ("grandbo.store",), "evaluation measures the seams users call"),
    (("grandbo.ingest", "grandbo.triage"), ("grandbo.store",), "alerts and plans go through the handle"),
    (("grandbo.history",), ("grandbo.store",), "imported history is filed through the org handle"),
    (("grandbo.history.sources",), ("grandbo.memory", "grandbo.tiers"), "a reader only reads; the importer files"),
    (("grandbo.embeddings",), ("grandbo.store",), "providers know nothing of storage"),
    (("grandbo.store",), ("grandbo.retrieval",), "the store hands rows up; the index lives above it"),
    (("grandbo.retrieval",), ("grandbo.store",), "retrieval reads the change feed through grandbo.ports"),
    (
        ("grandbo.store",),
        ("grandbo.memory", "grandbo.service", "grandbo.tiers", "grandbo.worker", "grandbo.embeddings", *INTERFACES),
        "the store is the bottom layer",
    ),
    (("grandbo.memory", "grandbo.worker", "grandbo.ports"), ("grandbo.store",), "only the factory opens a store"),
    (("grandbo",), INTERFACES, "nothing depends on an interface but the interface itself"),
    (("grandbo",), ("grandbo.devtools",), "the development Postgres is for tests and benchmarks only"),
]


# The one module allowed through each wall: the factory opens the store, `python -m grandbo` is the CLI.
ALLOWED = [("grandbo.service", "grandbo.store"), ("grandbo.__main__", "grandbo.cli")]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, root: Path) -> set[str]:
    """Every module `path` imports, relative imports resolved."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def crossings(root: Path) -> list[str]:
    """Every import of the package at `root` that crosses a forbidden direction, as 'who -> what: why'."""
    found = []
    for path in sorted(root.rglob("*.py")):
        who = module_name(path, root)
        for what in sorted(imported(path, root)):
            for sources, targets, why in FORBIDDEN:
                if _within(who, sources) and _within(what, targets) and not _within(who, targets):
                    if any(who == door and _within(what, (room,)) for door, room in ALLOWED):
                        continue
                    found.append(f"{who} -> {what}: {why}")
                    break
    return found


def test_no_import_crosses_a_forbidden_direction():
    assert crossings(PACKAGE) == []


def test_the_check_finds_a_crossing_wherever_the_import_hides(tmp_path):
    root = tmp_path / "grandbo"
    for folder in ("tiers", "store", "retrieval", "cli"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "tiers" / "sneaky.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from grandbo.store.base import Store\n"
    )
    (root / "store" / "index.py").write_text("def f():\n    from ..retrieval import index\n")
    (root / "retrieval" / "ok.py").write_text("from grandbo.model import Entry\n")
    (root / "model.py").write_text("import grandbo.cli.app\n")
    assert crossings(root) == [
        "grandbo.model -> grandbo.cli.app: nothing depends on an interface but the interface itself",
        "grandbo.store.index -> grandbo.retrieval: the store hands rows up; the index lives above it",
        "grandbo.store.index -> grandbo.retrieval.index: the store hands rows up; the index lives above it",
        "grandbo.tiers.sneaky -> grandbo.store.base: tiers use the org-bound handle and its repositories",
        "grandbo.tiers.sneaky -> grandbo.store.base.Store: tiers use the org-bound handle and its repositories",
    ]


def test_only_create_app_mounts_the_web_console():
    """The console is a face like the API: only `create_app` imports it, and it imports no other face."""
    importers = {
        module_name(path, PACKAGE)
        for path in PACKAGE.rglob("*.py")
        if not _within(module_name(path, PACKAGE), ("grandbo.web",))
        and any(_within(name, ("grandbo.web",)) for name in imported(path, PACKAGE))
    }
    assert importers == {"grandbo.api.app"}
    faces = ("grandbo.cli", "grandbo.api", "grandbo.mcp")
    reached = {
        name for path in (PACKAGE / "web").rglob("*.py") for name in imported(path, PACKAGE) if _within(name, faces)
    }
    assert reached == set()


def test_modules_stay_small():
    large = {
        module_name(path, PACKAGE): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > 450
    }
    # Both stores are split by concern (store/sqlite/, store/postgres/): every module is held to the cap.
    assert not large, large
