"""For the history readers' tests: a documented record with any of its values replaced by any JSON value."""

import json
import tempfile
import tracemalloc
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grandbo.errors import ImportFormatError
from grandbo.history.record import HistoricIncident, Refusal, Skipped

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def paths(value, here=()):
    """Every place in a JSON value, from the root down."""
    yield here
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from paths(inner, (*here, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from paths(inner, (*here, index))


def replaced(value, path, new):
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = replaced(copy[path[0]], path[1:], new)
    return copy


def check_any_value_anywhere_is_read_or_refused(reader, record, page_key, examples=100, essential=("id",)):
    """Replace up to three places of `record` by any JSON value: the reader yields a record, a refusal or a skip
    (a `type` or `mode` the change made a test's), never raises but the ImportFormatError of a file whose one record
    was replaced by an object without the vendor's fields (`_sniff`); and it refuses only when a change hit the
    record itself or one of its `essential` keys: any other field of the wrong type is read as absent (and said)."""
    places = list(paths(record))

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(changes=st.lists(st.tuples(st.sampled_from(places), JSON), max_size=3))
    def run(changes):
        mutated, hit, whole = record, False, False
        for path, new in changes:
            try:
                mutated = replaced(mutated, path, new)
                hit = hit or not path or path[0] in essential
                whole = whole or not path
            except (IndexError, KeyError, TypeError):
                continue  # an earlier change removed that place
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "page.json"
            path.write_text(json.dumps({page_key: [mutated]}))
            try:
                found = list(reader.read(path))
            except ImportFormatError as error:  # the one record replaced by an object without the vendor's fields
                refused = error
            else:
                refused = None
        if refused is not None:
            assert whole and "does not look like" in refused.message, (changes, refused.message)
            return
        assert len(found) == 1 and isinstance(found[0], HistoricIncident | Refusal | Skipped)
        # The readers themselves take any type anywhere; the last-resort refusal (a TypeError caught) never shows.
        assert not (isinstance(found[0], Refusal) and found[0].reason.startswith("values of unexpected types"))
        assert hit or not isinstance(found[0], Refusal), (changes, found[0])

    run()


def read_and_peak(reader, path: Path) -> tuple[int, int]:
    """How many incidents `reader` reads at `path`, and the most memory the read held at once (bytes, tracemalloc):
    a streaming reader's peak stays flat however many records the file holds."""
    tracemalloc.start()
    try:
        count = sum(1 for item in reader.read(path) if isinstance(item, HistoricIncident))
        return count, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
