"""The open alert groups a delivery places its new alerts among (`Alerts.receive`), read with a bound on what they
cost: the newest first, a page at a time, up to OPEN_GROUPS_READ of them and only until they keep OPEN_GROUP_MARKS
words between them (their members' word marks, `tiers.grouping`).

Why words and not only groups: what grouping reads of a group is its members, up to TEXT_MEMBERS of them with up to
WORD_MARKS words each. One organization's storm of 500 services, each alert with a long summary of words alike
nothing, left 500 open groups of 37 KB each (18.8 MB): every later delivery of that organization, a single alert
too, read, parsed and indexed all of them, about 1 s of CPU under the process's one interpreter lock, and while it
sent four at a time another organization's recall p50 went from 10 to 264 ms and its webhook's from 8 to 306 ms
(probe 23c). Groups of ordinary alerts keep a few words a member, and their 500 fit in the bound whole."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

import structlog

from grandbo.ports import Document, OrgDocuments
from grandbo.tiers.grouping import ALERT_GROUPS, AlertGroup
from grandbo.tiers.records import next_page, read_records

OPEN_GROUPS_READ = 500  # open groups of the window a delivery reads at most (the newest: a storm's groups)
OPEN_GROUP_MARKS = 40_000  # their members' word marks, past which no further page is read
OPEN_GROUPS_PAGE = 20  # groups a read asks for: past the bound, at most a page more is read
log = structlog.get_logger(__name__)


def open_groups(
    documents: OrgDocuments, since: datetime, org: str, slotted: Collection[str] = ()
) -> tuple[list[AlertGroup], dict[str, Document]]:
    """The open groups changed since `since`, the newest first, within the bounds above, then those of `slotted` (the
    groups the delivery's services' slots name) not among them: an alert still finds its own service's group, however
    many others changed since. With their documents by id (what each was before a delivery changed it: `as_read`)."""
    groups: list[AlertGroup] = []
    docs: dict[str, Document] = {}
    marks, before = 0, None
    while len(groups) < OPEN_GROUPS_READ:
        asked = min(OPEN_GROUPS_PAGE, OPEN_GROUPS_READ - len(groups))
        page = documents.newest(ALERT_GROUPS, asked, before=before, since=since, refs=["open"])
        docs.update((doc.doc_id, doc) for doc in page)
        for group in read_records(AlertGroup, page, "alert group"):
            groups.append(group)
            marks += sum(len(member.words) for member in group.members)
        before = next_page(page, asked)
        if before is None:
            break
        if marks >= OPEN_GROUP_MARKS:  # more groups are open: the older ones are left out of this delivery's
            log.info("alerts.open_groups_bounded", org_id=org, groups=len(groups), marks=marks)
            break
    if missing := [group_id for group_id in dict.fromkeys(slotted) if group_id not in docs]:
        found = [doc for doc in documents.find(ALERT_GROUPS, ["open"], ids=missing) if doc.updated_at >= since]
        docs.update((doc.doc_id, doc) for doc in found)
        groups += read_records(AlertGroup, found, "alert group")
    return groups, docs


def as_read(doc: Document | None) -> dict[str, Any] | None:
    """A group's document as grouping read it (its JSON), for the history of what a delivery changed."""
    return None if doc is None else AlertGroup.model_validate(doc.data).model_dump(mode="json")
