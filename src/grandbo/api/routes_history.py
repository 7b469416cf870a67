"""`POST /v1/import-from/{source}`: past incidents over REST (admin key), as `grandbo import-from` files them.

The body is the export itself, streamed to a private temporary file (never held in memory) up to
`MAX_IMPORT_BODY`; the answer is the import's report."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from grandbo.api.deps import AdminMemory
from grandbo.errors import PayloadTooLargeError
from grandbo.history.importer import import_history
from grandbo.history.registry import reader
from grandbo.history.sources.tabular import parse_pairs

router = APIRouter(prefix="/v1")
PREFIX = "/v1/import-from/"  # the middlewares leave these bodies to the route (streamed, bounded here)
MAX_IMPORT_BODY = 1 << 30  # 1 GiB: years of incidents
SUFFIX = {"csv": ".csv", "jsonl": ".jsonl", "markdown": ".md"}


class Refused(BaseModel):
    location: str
    reason: str


class ImportAnswer(BaseModel):
    """What the import did (dry: would do)."""

    source: str
    imported: int
    updated: int
    unchanged: int
    refused: list[Refused]
    decisions: dict[str, int] = Field(description="Every decision taken on messy data, counted.")
    dry_run: bool
    refused_more: int = 0


@router.post("/import-from/{source}", response_model=ImportAnswer, tags=["history"])
async def import_from(
    source: str,
    request: Request,
    memory: AdminMemory,
    dry_run: Annotated[bool, Query(description="Write nothing; report what would change.")] = False,
    mapping: Annotated[
        str | None,
        Query(alias="map", max_length=4000, description="csv/jsonl: FIELD=COLUMN,... (title=root_cause,...)."),
    ] = None,
) -> dict[str, Any]:
    """Import past incidents from an export in the body (the file `grandbo import-from SOURCE PATH` reads): each
    becomes an incident with its findings and post-mortem as memory; a re-import updates what changed and leaves
    the rest alone. Admin key."""
    chosen, pairs = reader(source), parse_pairs(mapping)
    handle, name = tempfile.mkstemp(prefix="grandbo-import-", suffix=SUFFIX.get(source, ".json"))
    try:
        with os.fdopen(handle, "wb") as out:
            size = 0
            async for block in request.stream():
                size += len(block)
                if size > MAX_IMPORT_BODY:
                    raise PayloadTooLargeError(
                        f"The export is over {MAX_IMPORT_BODY} bytes; split it and import the parts (a re-import "
                        "of a part already in changes nothing).",
                        detail={"limit_bytes": MAX_IMPORT_BODY},
                    )
                out.write(block)
        report = await run_in_threadpool(
            import_history, memory, chosen, Path(name), mapping=pairs, dry_run=dry_run, actor="api"
        )
    finally:
        Path(name).unlink(missing_ok=True)
    return report.to_dict()
