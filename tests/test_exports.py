import importlib
import importlib.metadata

import grandbo


def test_public_api_is_sorted_and_each_name_is_grandbos_own():
    assert grandbo.__all__ == sorted(grandbo.__all__)
    for name in set(grandbo.__all__) - {"__version__"}:
        value = getattr(grandbo, name)
        assert value.__module__.startswith("grandbo."), name  # defined here, not a re-export of a dependency
        assert getattr(importlib.import_module(value.__module__), name) is value, name
    assert grandbo.__version__ == importlib.metadata.version("grandbo")


def test_every_public_name_defined_in_the_package_is_exported():
    public = {
        name
        for name, value in vars(grandbo).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("grandbo.")
    }
    assert public - {"configure_logs"} <= set(grandbo.__all__)
