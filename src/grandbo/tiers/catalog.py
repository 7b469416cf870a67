"""The organization's service catalog: services, what each calls and who owns it."""

from __future__ import annotations

from collections.abc import Sequence

from grandbo.errors import InvalidInputError
from grandbo.ports import DocumentWrite, OrgDocuments
from grandbo.tiers import operations
from grandbo.tiers.operations import SERVICES
from grandbo.tiers.topology import Service, Topology, parse_catalog, twice


class Catalog:
    """The organization's services and their dependencies."""

    def __init__(self, documents: OrgDocuments) -> None:
        self.documents = documents

    def import_text(self, text: str, *, replace: bool = False, actor: str = "api") -> list[Service]:
        """Add or update services from a YAML/JSON catalog; with `replace`, drop services not in it."""
        services = parse_catalog(text)
        return self.put(services, replace=replace, actor=actor)

    def put(self, services: Sequence[Service], *, replace: bool = False, actor: str = "api") -> list[Service]:
        if problems := twice(services):
            raise InvalidInputError("Invalid catalog: " + "; ".join(problems) + ".", detail={"problems": problems})
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

    def topology(self) -> Topology:
        return operations.topology(self.documents)
