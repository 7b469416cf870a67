import grandbo


def test_public_api_is_sorted_and_importable():
    assert grandbo.__all__ == sorted(grandbo.__all__)
    for name in grandbo.__all__:
        assert getattr(grandbo, name) is not None


def test_every_public_name_defined_in_the_package_is_exported():
    public = {
        name
        for name, value in vars(grandbo).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("grandbo.")
    }
    assert public - {"configure_logs"} <= set(grandbo.__all__)
