"""The routes a source delivers to (`POST /v1/webhooks/{source}`, `POST /v1/changes/{source}`), one contract for
both: the body is read raw, since the sender signs its bytes, and so declared to OpenAPI by hand; the delivery is
taken off the event loop; the answer is 202 when it wrote something, 200 when it was a redelivery."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from fastapi import Request, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from grandbo.memory import OrgMemory

T = TypeVar("T")


def delivery_route(answer: type[BaseModel], wrote: str, body: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The arguments of `router.post` for a delivery route answering `answer`: `wrote` says when it is a 202;
    `body` says what the sender posts, `schema` its JSON schema."""
    return {
        "response_model": answer,
        "responses": {202: {"model": answer, "description": wrote}},
        "openapi_extra": {
            "requestBody": {"required": True, "description": body, "content": {"application/json": {"schema": schema}}}
        },
    }


async def receive(
    request: Request,
    take: Callable[[OrgMemory, str, bytes, Mapping[str, str]], T],
    memory: OrgMemory,
    source: str,
) -> T:
    """What `take` made of the delivery: its raw bytes (the sender signs them) and its headers, off the loop."""
    body = await request.body()
    return await run_in_threadpool(take, memory, source, body, dict(request.headers))


def answered(out: BaseModel, wrote: bool) -> Response:
    """The delivery's answer `out`: 202 when it `wrote` something, 200 when nothing was new."""
    return Response(out.model_dump_json(), media_type="application/json", status_code=202 if wrote else 200)
