"""The organization's service catalog: services, what each calls and who owns it.

A catalog holds at most `GRANDBO_SERVICES_PER_ORG` services: every process reads it whole (the topology recall and
triage weigh), and 50,000 services took a process's first read of them 5.9 s and each change 1.6 s. The storage
limit bounds it in bytes only, thousands of times that.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence

from grandbo.errors import InvalidInputError, ServiceLimitError, StoreFullError
from grandbo.names import refuse_added
from grandbo.ports import DocumentWrite, OrgDocuments
from grandbo.tiers import operations
from grandbo.tiers.operations import SERVICES
from grandbo.tiers.retry import rewritten
from grandbo.tiers.topology import Service, Topology, parse_catalog, twice

# What one service may hold, checked when it is written (a catalog stored before stays readable): a catalog of
# 1,100 services of 110 dependencies each (0.9 MB) cost each read of it 380 ms (hostile probe, session 13).
MAX_DEPENDENCIES, MAX_OWNERS, MAX_TEXT = 200, 50, 4_000
IDS_AT_ONCE = 1_000  # services sought by name in one read (SQLite takes up to 32,766 parameters a statement)
# Services written (or dropped) in one transaction at most. Written in one, a 5,000-service replace of 5,000 held the
# embedded store's write lock 1.7 s, every other organization's writes waiting behind it (probe 25); 500 take a
# twentieth of that, as a 500-alert delivery does.
WRITE_AT_ONCE = 500
# Dependencies a catalog holds at most, all its services' together: this many a service of GRANDBO_SERVICES_PER_ORG
# (50,000 at the default). Every process holds the catalog's graph whole, made whole when first read (and after more
# than `operations.CATALOG_CHANGES` writes), and walks it from the services a question names: 10,000 services of 40
# dependencies each (400,000, a tenth of what MAX_DEPENDENCIES let through) took 8.7 s a graph, made after every
# change then, and one admin's loop of a small change and a recall held another org's recall p50 72 -> 301 ms, p90
# 103 -> 590 ms (probe 28). A change makes again the edges of the services it touches only (`Topology.changed`).
DEPENDENCIES_A_SERVICE = 5
TALLY = "service_tally"  # one document per org (its id the same), rewritten by every write that adds services


class Catalog:
    """The organization's services and their dependencies."""

    def __init__(self, documents: OrgDocuments, kept: Callable[[], Topology] | None = None, most: int = 10_000) -> None:
        self.documents = documents
        self._kept = kept  # the process's topology of the org, read again only when its documents changed
        self.most = most  # services the catalog may hold (GRANDBO_SERVICES_PER_ORG)

    def import_text(self, text: str, *, replace: bool = False, actor: str = "api") -> list[Service]:
        """Add or update services from a YAML/JSON catalog; with `replace`, drop services not in it."""
        services = parse_catalog(text)
        return self.put(services, replace=replace, actor=actor)

    def put(self, services: Sequence[Service], *, replace: bool = False, actor: str = "api") -> list[Service]:
        """Add or update `services`; with `replace`, drop the others. A write that adds services and would leave
        more than `most` is refused whole (ServiceLimitError); one that adds none never is. The services `replace`
        drops are dropped first, then the services written, WRITE_AT_ONCE a transaction: a write cut short after its
        first (a crash, a full disk, the storage limit) leaves what it wrote, never more services than the catalog
        held or was sent, and sent again it finishes."""
        if problems := twice(services) + [problem for s in services for problem in _oversized(s)]:
            raise InvalidInputError("Invalid catalog: " + "; ".join(problems) + ".", detail={"problems": problems})
        # A look-alike name is refused unless the catalog held it before (read only when a name is one).
        refuse_added([name for s in services for name in (s.name, *s.depends_on)], self._held(), "services")
        names = [s.name for s in services]
        self._refuse_dependencies(services, replace)

        def attempt() -> list[DocumentWrite]:
            # The count and the write are one step, as a key's (`tiers.keys`): the org's tally, read before the
            # count, is written with the services that add any or change a service's dependencies, expecting the
            # version read, so of two writes that counted alike the second is stale and counts again (`rewritten`).
            tally = self.documents.get(TALLY, TALLY)
            batches = [names[at : at + IDS_AT_ONCE] for at in range(0, len(names), IDS_AT_ONCE)]  # a large file's
            held = {doc.doc_id for ids in batches for doc in self.documents.find(SERVICES, ids=ids, keys=("name",))}
            # What a replace drops goes first: a write cut short never leaves the catalog past what it held or what
            # it is sent (written last, a replace of 1,000 by 1,000 cut short held 1,499 of a limit of 1,000;
            # review 25).
            keep = set(names)
            writes = [
                DocumentWrite(SERVICES, doc_id, None, "service.removed", ref=doc_id)
                for doc_id in (self._names() if replace else ())
                if doc_id not in keep
            ]
            writes += [
                DocumentWrite(SERVICES, s.name, s.model_dump(mode="json"), "service.put", ref=s.name) for s in services
            ]
            first = WRITE_AT_ONCE  # the first piece's writes, and the tally when it is written
            grows, moves = self._dependencies(writes[:first])
            if (added := len(names) - len(held)) or moves:
                count = self.documents.count(SERVICES, self.most + 1)
                after = len(names) if replace else count + added
                if after > self.most and added:  # one that adds none passes, an operator's lowered limit or not
                    held_text = f"{count:,}" if count <= self.most else f"more than {self.most:,}"
                    raise ServiceLimitError(
                        (f"This catalog, sent to replace the organization's, holds {after:,} services"
                         if replace else f"The catalog holds {held_text} services and this write adds {added:,}")
                        + f": past the {self.most:,} it may hold (GRANDBO_SERVICES_PER_ORG), so nothing of it was "
                        "written.",
                        detail={"services": count, "added": added, "limit": self.most},
                    )  # fmt: skip
                writes.insert(0, DocumentWrite(TALLY, TALLY, {"added": added, "dependencies": grows}, "service.counted",
                                               expected_version=tally.version if tally is not None else 0))  # fmt: skip
                first += 1
            # The tally, with the first piece: a count gone stale meanwhile refuses it before anything is written
            self.documents.put(writes[:first], actor)
            return writes[first:]

        rest = rewritten(attempt, what="The catalog")
        for at in range(0, len(rest), WRITE_AT_ONCE):
            try:
                rewritten(functools.partial(self._piece, rest[at : at + WRITE_AT_ONCE], actor), what="The catalog")
            except StoreFullError as error:  # the disk, or the org's storage limit: said of the piece alone
                written = len(services) - sum(write.data is not None for write in rest[at:])
                raise type(error)(
                    f"{written:,} of the {len(services):,} services sent were written, {WRITE_AT_ONCE} a transaction, "
                    f"then the next piece was refused: {error.message} Send the write again once there is room: what "
                    "was written stays.",
                    detail={**error.detail, "written": written},
                ) from None
            except ServiceLimitError as error:
                written = len(services) - sum(write.data is not None for write in rest[at:])
                held = ("dependencies", self.most * DEPENDENCIES_A_SERVICE) if "after" in error.detail else (
                    "services", self.most)  # fmt: skip
                raise ServiceLimitError(
                    f"{written:,} of the {len(services):,} services sent were written, then another write took the "
                    f"catalog to the {held[1]:,} {held[0]} it may hold (GRANDBO_SERVICES_PER_ORG), so the rest was "
                    "not. Drop services, or send fewer, then send the write again: what was written stays.",
                    detail={**error.detail, "limit": held[1], "written": written},
                ) from None
        return list(services)

    def _piece(self, writes: list[DocumentWrite], actor: str) -> None:
        """Write one piece after a write's first; one that adds services counts again with the tally, as the first
        did: another write may have added services since (two writes of 5,000 counted alike held 9,501 of a limit of
        5,000 when only the first piece counted; review 25)."""
        ids = [write.doc_id for write in writes if write.data is not None]
        if ids:
            tally = self.documents.get(TALLY, TALLY)
            held = {doc.doc_id for doc in self.documents.find(SERVICES, ids=ids, keys=("name",))}
            grows, moves = self._dependencies(writes)
            if (added := len(ids) - len(held)) or moves:
                count = self.documents.count(SERVICES, self.most + 1)
                if count + added > self.most and added:
                    raise ServiceLimitError("past the limit", detail={"services": count, "added": added})
                version = tally.version if tally is not None else 0
                writes = [DocumentWrite(TALLY, TALLY, {"added": added, "dependencies": grows}, "service.counted",
                                        expected_version=version), *writes]  # fmt: skip
        self.documents.put(writes, actor)

    def _dependencies(self, writes: Sequence[DocumentWrite]) -> tuple[int, bool]:
        """The dependencies `writes` add to the catalog (those of the services written, less those they held or
        drop), refused past the catalog's most (`_refuse_dependencies`), and whether they change any service's count:
        counted on the process's topology read now, after the tally was read. A write that changes any writes the
        tally with it, expecting the version read, so of two (in two processes) that counted alike the second is
        stale and counts again: counted on each process's copy alone, both passed (issue 24). One that lowers a
        service's count too: what it takes from one service another may spend, and a write of that service counted
        before it (on the count it lowered) then put it back uncounted, past the most by that difference."""
        topology = self.topology()
        held = topology.services
        changes = [
            (len(write.data["depends_on"]) if write.data is not None else 0)
            - (len(held[write.doc_id].depends_on) if write.doc_id in held else 0)
            for write in writes
            if write.collection == SERVICES
        ]
        if (grows := sum(changes)) > 0:
            self._refused_past(topology.dependencies, topology.dependencies + grows)
        return max(grows, 0), any(changes)

    def _refuse_dependencies(self, services: Sequence[Service], replace: bool) -> None:
        """Refuse a write that would leave the catalog more dependencies than it may hold (`DEPENDENCIES_A_SERVICE`
        a service of `most`), counted on the process's topology (its total kept: a write of one service counts one);
        one that adds none never is. Across processes the tally holds it (`_dependencies`, at the version read)."""
        topology = self.topology()
        before, held = topology.dependencies, topology.services
        sent = sum(len(s.depends_on) for s in services)
        after = (
            sent if replace else before - sum(len(held[s.name].depends_on) for s in services if s.name in held) + sent
        )
        self._refused_past(before, after)

    def _refused_past(self, before: int, after: int) -> None:
        """ServiceLimitError for a write that would leave the catalog `after` dependencies, more than it holds
        (`before`) and than it may."""
        most = self.most * DEPENDENCIES_A_SERVICE
        if after > most and after > before:
            raise ServiceLimitError(
                f"This write would leave the catalog {after:,} dependencies (depends_on entries, all its services' "
                f"together), past the {most:,} it may hold ({DEPENDENCIES_A_SERVICE} a service of "
                "GRANDBO_SERVICES_PER_ORG): every process holds the catalog's graph whole, so nothing of it was "
                "written. Name each service's direct dependencies only.",
                detail={"dependencies": before, "after": after, "limit": most},
            )

    def _held(self) -> Iterator[str]:
        """The names the catalog holds (its services' and their dependencies'), read when first asked for."""
        yield from self.topology().names

    def _names(self) -> list[str]:
        """Every service's name (its document id), none of the services read whole."""
        return [doc.doc_id for doc in self.documents.find(SERVICES, keys=("name",))]

    def topology(self) -> Topology:
        return self._kept() if self._kept is not None else operations.topology(self.documents)


def _oversized(service: Service) -> list[str]:
    """What of a service is past what one may hold."""
    counts = [
        ("depends_on", len(service.depends_on), MAX_DEPENDENCIES),
        ("owners", len(service.owners), MAX_OWNERS),
        ("escalation", len(service.escalation), MAX_TEXT),
        ("description", len(service.description), MAX_TEXT),
    ]
    return [f"{service.name}: {field} holds {size:,}, at most {most:,}" for field, size, most in counts if size > most]
