"""The organization's service catalog: services, what each calls and who owns it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from grandbo.errors import InvalidInputError
from grandbo.names import refuse_added
from grandbo.ports import DocumentWrite, OrgDocuments
from grandbo.tiers import operations
from grandbo.tiers.operations import SERVICES
from grandbo.tiers.topology import Service, Topology, parse_catalog, twice

# What one service may hold, checked when it is written (a catalog stored before stays readable): a catalog of
# 1,100 services of 110 dependencies each (0.9 MB) cost each read of it 380 ms (hostile probe, session 13).
MAX_DEPENDENCIES, MAX_OWNERS, MAX_TEXT = 200, 50, 4_000


class Catalog:
    """The organization's services and their dependencies."""

    def __init__(self, documents: OrgDocuments, kept: Callable[[], Topology] | None = None) -> None:
        self.documents = documents
        self._kept = kept  # the process's topology of the org, read again only when its documents changed

    def import_text(self, text: str, *, replace: bool = False, actor: str = "api") -> list[Service]:
        """Add or update services from a YAML/JSON catalog; with `replace`, drop services not in it."""
        services = parse_catalog(text)
        return self.put(services, replace=replace, actor=actor)

    def put(self, services: Sequence[Service], *, replace: bool = False, actor: str = "api") -> list[Service]:
        if problems := twice(services) + [problem for s in services for problem in _oversized(s)]:
            raise InvalidInputError("Invalid catalog: " + "; ".join(problems) + ".", detail={"problems": problems})
        # A look-alike name is refused unless the catalog held it before (read only when a name is one).
        refuse_added([name for s in services for name in (s.name, *s.depends_on)], self._held(), "services")
        writes = [
            DocumentWrite(SERVICES, s.name, s.model_dump(mode="json"), "service.put", ref=s.name) for s in services
        ]
        if replace:
            keep = {s.name for s in services}
            writes += [
                DocumentWrite(SERVICES, doc.doc_id, None, "service.removed", ref=doc.doc_id)
                for doc in self.documents.find(SERVICES)
                if doc.doc_id not in keep
            ]
        self.documents.put(writes, actor)
        return list(services)

    def _held(self) -> Iterator[str]:
        """The names the catalog holds (its services' and their dependencies'), read when first asked for."""
        yield from self.topology().names

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
