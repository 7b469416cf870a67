import ast
import importlib
import importlib.metadata
from pathlib import Path

import grandbo


def test_public_api_is_sorted_and_each_name_is_grandbos_own():
    assert grandbo.__all__ == sorted(grandbo.__all__)
    for name in set(grandbo.__all__) - {"__version__"}:
        value = getattr(grandbo, name)
        assert value.__module__.startswith("grandbo."), name  # defined here, not a re-export of a dependency
        assert getattr(importlib.import_module(value.__module__), name) is value, name
    assert grandbo.__version__ == importlib.metadata.version("grandbo")


def _typed_imports() -> dict[str, str]:
    """The names `grandbo/__init__.py` imports for type checkers (`if TYPE_CHECKING:`), each with its module."""
    tree = ast.parse(Path(grandbo.__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    return {alias.name: str(node.module) for node in block.body if isinstance(node, ast.ImportFrom)
            for alias in node.names}  # fmt: skip


def test_every_public_name_resolves_and_the_typed_imports_and_the_lazy_table_match_all():
    # Could not fail before: it read `vars(grandbo)`, which holds only the names already imported.
    public = set(grandbo.__all__) - {"__version__"}
    for name in public:
        assert getattr(grandbo, name).__name__ == name
    typed = _typed_imports()
    assert set(typed) == public  # a name exported but not typed is Any to mypy; one typed but not exported, a lie
    assert {name: f"grandbo.{grandbo._HOMES.get(name, 'model')}" for name in public} == typed
    assert set(grandbo._HOMES) <= public


def test_the_lazy_attribute_hook_is_hidden_from_type_checkers():
    # Failed before: a module-level `__getattr__ -> Any` let `from grandbo import Grandob` pass mypy.
    tree = ast.parse(Path(grandbo.__file__).read_text())
    top = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert not top & {"__getattr__", "__dir__"}
    hidden = next(
        node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "not TYPE_CHECKING"
    )
    assert {node.name for node in hidden.body if isinstance(node, ast.FunctionDef)} == {"__getattr__", "__dir__"}
