"""An outcome's values as the store's tallies hand them over (`OrgDocuments.tally`): read as `Outcome` reads them,
or None where they are none. Shared by the analytics' counts (`ledger_tally`) and the records of a few runbooks
(`ledger_records`), which must read them alike."""

from __future__ import annotations

import math
from datetime import datetime

from grandbo.values import utc


def number(value: object) -> float | None:
    """A value the store read as a number, or None where it is none (text a replayed export or an older release
    left, which `Outcome` does not read): a whole read left such an outcome out (`records.unreadable`), and
    `float` of it failed the org's analytics page."""
    try:
        found = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return found if math.isfinite(found) else None


def moment(value: object) -> datetime | None:
    """An outcome's time with its zone, UTC where it has none (as `Outcome` reads it: an older release's import
    stored "2024-01-01" so), or None where it is no time (as `number`)."""
    try:
        return utc(datetime.fromisoformat(str(value))) if value is not None else None
    except ValueError:
        return None
