"""How an import that stopped early says how far it got: Ctrl-C (`Interrupted`) or the store's outage (`cut_short`).
What a chunk had written is kept either way, and the same import run again resumes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grandbo.errors import StoreUnavailableError

if TYPE_CHECKING:
    from grandbo.history.importer import HistoryReport


def cut_short(error: StoreUnavailableError, report: HistoryReport, chunk: int) -> StoreUnavailableError:
    """The store's outage as the import tells it: how far it got, and that the same import run again resumes."""
    return type(error)(
        f"The store stopped answering during the import ({error.code}), after {report.read} records read: "
        f"{report.imported} filed new, {report.updated} updated, {report.unchanged} unchanged (the chunk under way, "
        f"up to {chunk} records, may have been filed too). What was filed is kept: run the same import again once the "
        "store answers (GET /readyz); the records filed are counted unchanged and the rest are filed.",
        detail={"read": report.read, "imported": report.imported, "updated": report.updated,
                "unchanged": report.unchanged, "store_error": error.message},
    )  # fmt: skip


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during an import, with the report of what was done before it. What a chunk had written is kept (its
    records' import records are written last), so the same import run again resumes: the records filed before are
    unchanged by their hash and written again nowhere."""

    def __init__(self, report: HistoryReport) -> None:
        super().__init__()
        self.report = report
