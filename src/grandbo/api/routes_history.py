"""`POST /v1/import-from/{source}`: past incidents over REST (admin key), as `grandbo import-from` files them.

The body is the export itself, streamed to a private file under GRANDBO_HOME/uploads/ (`api.uploads`; never held
in memory) up to `MAX_IMPORT_BODY`, removed once the import has ended whatever its end; the answer is the import's
report. Imports run in the process's bounded `imports` pool (`grandbo.background`): one checked before the upload,
so a refused import uploads nothing."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field
from starlette.requests import ClientDisconnect

from grandbo.api import uploads
from grandbo.api.deps import AdminMemory
from grandbo.errors import (
    GrandboError,
    ImportsBusyError,
    InvalidInputError,
    NotAuthorizedError,
    OrgOverloadedError,
    OverloadedError,
    UploadStalledError,
)
from grandbo.history.importer import HistoryReport, import_history
from grandbo.history.registry import chosen
from grandbo.memory import OrgMemory
from grandbo.service import Grandbo
from grandbo.tiers.imported import Imported
from grandbo.tiers.keys import bearer_key

router = APIRouter(prefix="/v1")
PREFIX = "/v1/import-from/"  # the middlewares leave these bodies to the route (streamed, bounded here)
MAX_IMPORT_BODY = 1 << 30  # 1 GiB: years of incidents
SUFFIX = {"csv": ".csv", "jsonl": ".jsonl", "markdown": ".md"}
TRICKLE_BYTES = 4096  # what an upload must send in each GRANDBO_IMPORT_IDLE_SECONDS (a byte at a time is stalled)
NAME_BYTES = 255  # a file's name on the temporary folder's file system (200 characters can be 800 bytes)


class Refused(BaseModel):
    location: str
    reason: str


class ImportAnswer(BaseModel):
    """What the import did (dry: would do)."""

    source: str
    imported: int
    updated: int
    unchanged: int
    skipped: int = Field(0, description="Records the source marks as not incidents (test, declined, duplicate...).")
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
    name: Annotated[
        str | None,
        Query(
            max_length=200,
            pattern=r"^[^/\\\x00]+$",
            description="The file's name as it was kept (markdown: required; its id and date come from it, "
            "`2023-04-12-db-failover.md`, when its front matter has none).",
        ),
    ] = None,
) -> dict[str, Any]:
    """Import past incidents from an export in the body (the file `grandbo import-from SOURCE PATH` reads): each
    becomes an incident with its findings and post-mortem as memory; a re-import updates what changed in the source
    and keeps what people wrote in Grandbo since (their findings, a close). Admin key."""
    found, pairs = chosen(source, mapping)  # a bad map refused before anything is uploaded
    if source == "markdown" and not name:
        raise InvalidInputError(
            "Name the post-mortem's file (`?name=2023-04-12-db-failover.md`): without front matter its id and date "
            "come from the name, and a re-import of the same file must find the same incident.",
            detail={"source": source},
        )
    if (size := len((name or "").encode(errors="replace"))) > NAME_BYTES:  # else the upload's file cannot be made
        raise InvalidInputError(
            f"The file's name is {size} bytes in UTF-8, over the {NAME_BYTES} a file's name may have: shorten it "
            "(keep its date and the words that say what happened).",
            detail={"name_bytes": size, "limit_bytes": NAME_BYTES},
        )
    grandbo: Grandbo = request.app.state.grandbo
    imports = grandbo.pools.imports
    with _busy_named():
        imports.admit(memory.org)  # checked before the upload: a refused import uploads nothing
    # nor one its org's running import would refuse, nor one over what the org may still store (reads: off the loop)
    bound = await asyncio.to_thread(_before_upload, memory, dry_run)
    if (declared := request.headers.get("content-length", "")).isdigit():
        bound.check(int(declared))  # declared too large: refused unread
    with _one_upload(request, memory.org):
        uploads.sweep(grandbo.settings.home)  # what a process killed during an upload or an import left
        upload = _upload_folder(grandbo.settings.home)
        path = upload.folder / (name if name not in (None, ".", "..") else "upload" + SUFFIX.get(source, ".json"))
        running: Future[HistoryReport] | None = None
        try:
            with uploads.no_room_is_507(), path.open("xb") as out:
                size, blocks = 0, _blocks(request, grandbo.settings.import_idle_seconds)
                async for block in blocks:
                    size += len(block)
                    bound.check(size)
                    uploads.keep_free(upload.folder, len(block), 2 * grandbo.settings.disk_reserve_mb)
                    out.write(block)
            still = _key_active(grandbo, request.headers.get("authorization"))
            task = functools.partial(import_history, memory, found, path, mapping=pairs, dry_run=dry_run, actor="api",
                                     still=still)  # fmt: skip
            with _busy_named():  # another org's import may have taken the place during the upload
                running = imports.submit(memory.org, task)
            try:
                report = await asyncio.wrap_future(running)
            except GrandboError as error:
                _by_its_name(error, upload.folder)
                raise
        finally:
            # The upload goes when the import has ended: a cancelled request (a server stopping) stops no thread.
            if running is None:
                upload.remove()
            else:
                running.add_done_callback(lambda _: upload.remove())
        return report.to_dict()


def _by_its_name(error: GrandboError, folder: Path) -> None:
    """Make `error` say the upload by its name, not where this server keeps it: a refused export's detail gave an
    admin of any org the server's GRANDBO_HOME (`/root/.grandbo/uploads/import-.../upload.json`, probe 26)."""
    kept = f"{folder}{os.sep}"
    error.message = error.message.replace(kept, "")
    error.detail = {key: value.replace(kept, "") if isinstance(value, str) else value
                    for key, value in error.detail.items()}  # fmt: skip


def _key_active(grandbo: Grandbo, authorization: str | None) -> Callable[[HistoryReport], None]:
    """What an import checks before each chunk it writes: that the admin key it was started with is still active
    (read from the store, as every admin request reads it). Checked only when the request began, an import of
    6,000 records filed 3,200 of them in the 6 s after its key was revoked (probe 24), and one of a 1 GiB export
    would have gone on for its hour."""
    key = bearer_key(authorization)

    def still(report: HistoryReport) -> None:
        try:
            grandbo.authenticate(key, fresh=True)
        except NotAuthorizedError:
            raise NotAuthorizedError(
                f"The key this import was started with was revoked (or its organization deleted) while it ran: it "
                f"stopped after {report.read} records read ({report.imported} filed new, {report.updated} updated, "
                f"{report.unchanged} unchanged; what was filed is kept). To finish it, run the same import again "
                "with an active admin key: the records filed are counted unchanged and the rest are filed.",
                detail={"read": report.read, "imported": report.imported, "updated": report.updated},
            ) from None

    return still


def _before_upload(memory: OrgMemory, dry_run: bool) -> uploads.Bound:
    """What an import checks before its upload: the org's running import (`Imported.check`), and the org its records
    go to, fixed now (`OrgMemory.pin`): one dropped during the upload, maybe created again, gets none of them (not
    for a dry run, which writes nothing); and how large its upload may be: the disk it takes counts against what
    the org may still store (GRANDBO_ORG_STORAGE_LIMIT_MB), and is never more than MAX_IMPORT_BODY."""
    if not dry_run:
        memory.pin()
        Imported(memory.incidents).check()
    stored, limit = memory.stored()  # one read: `stats()` would join every active entry with its vector
    room = None if limit is None else limit - stored
    return uploads.Bound(memory.org, MAX_IMPORT_BODY, room)


def _upload_folder(home: Path) -> uploads.Upload:
    try:
        return uploads.Upload(home)
    except OSError as error:  # a read-only or full GRANDBO_HOME: say where, not a bare 500
        raise GrandboError(
            f"Cannot keep the upload in {home / uploads.FOLDER}: {error.strerror or error}. REST imports keep their "
            "export there while they run: make GRANDBO_HOME writable by the server (and give it room for the "
            "export), or import from the command line (`grandbo import-from SOURCE FILE`).",
            detail={"folder": str(home / uploads.FOLDER)},
        ) from None


@contextlib.contextmanager
def _one_upload(request: Request, org: str) -> Iterator[None]:
    """One upload at a time per organization and process. `admit` reserves nothing: an admin key had eight
    uploads of 20 MiB streaming at once, each up to 1 GiB, to the disk the stores share, where the org's imports
    then run one at a time anyway. (The route runs on the event loop: a plain set is enough.)"""
    uploading: set[str] = request.app.state.import_uploads
    if org in uploading:
        raise OrgOverloadedError(
            f"An import of organization {org} is already uploading to this process: send the next one when its "
            "answer has come (imports of one organization run one at a time).",
            retry_after=5,
            detail={"org": org, "uploading": 1},
        )
    uploading.add(org)
    try:
        yield
    finally:
        uploading.discard(org)


@contextlib.contextmanager
def _busy_named() -> Iterator[None]:
    """The imports pool's refusal when it is full, as the error that names its setting; an organization over its
    share (429) or a stopping process keeps its own error and remedy."""
    try:
        yield
    except OverloadedError as busy:
        if type(busy) is not OverloadedError or "queue" not in busy.detail:
            raise
        raise ImportsBusyError(busy.message, retry_after=busy.retry_after, detail=busy.detail) from None


async def _blocks(request: Request, idle: float) -> AsyncIterator[bytes]:
    """The body as it comes; a client that hangs up mid-upload is a 422 in the log, not a 500 with a traceback
    (no one is left to read the answer), and one that sends less than TRICKLE_BYTES in `idle` seconds (nothing at
    all, or a byte at a time) is dropped (408): a stalled upload held its part of the disk, up to 1 GiB, for as long
    as its client kept the connection (probe 22b), and one sent a byte every few seconds held it, its org's upload
    place and one of its slots without end (probe 23b)."""
    stream, clock = request.stream(), asyncio.get_running_loop().time
    ends, got = clock() + idle, 0  # the stretch of `idle` seconds the upload is in, and what it brought so far
    pending: asyncio.Task[bytes | None] | None = None  # the next block asked for: never cancelled mid-read
    try:
        while True:
            pending = pending or asyncio.ensure_future(_next(stream))
            done, _ = await asyncio.wait({pending}, timeout=max(ends - clock(), 0.0))
            block = pending.result() if done else b""
            if done:
                if block is None:
                    return
                pending = None
            got += len(block or b"")
            if clock() >= ends:
                if got < TRICKLE_BYTES:
                    raise UploadStalledError(
                        f"The upload sent {got} bytes in {idle:g} s (GRANDBO_IMPORT_IDLE_SECONDS), less than the "
                        f"{TRICKLE_BYTES} it must, so it was dropped and its part removed: send the export at once.",
                        detail={"reason": "stalled", "idle_seconds": idle, "sent_bytes": got},
                    )
                ends, got = clock() + idle, 0
            if block:
                yield block
    except ClientDisconnect:
        raise InvalidInputError(
            "The upload ended before its body did (the client went away); send the whole export again.",
            detail={"reason": "client_disconnected"},
        ) from None
    finally:
        if pending is not None:
            pending.cancel()


async def _next(stream: AsyncIterator[bytes]) -> bytes | None:
    """The stream's next block, None at its end (a task cannot end in StopAsyncIteration cleanly)."""
    try:
        return await anext(stream)
    except StopAsyncIteration:
        return None
