"""`POST /v1/recall` served: its query's embedding waited for on the event loop, not on a worker thread
(`grandbo.query_ahead`), then the recall on one."""

from __future__ import annotations

from collections.abc import Callable

from grandbo.model import Arm, RecallResult
from grandbo.query_ahead import embedded_first
from grandbo.service import Grandbo


async def recalled(grandbo: Grandbo, topic: str, arm: Arm, recall: Callable[[], RecallResult]) -> str:
    """The JSON of `recall()`, a recall of `topic` by `arm`, with its query embedded ahead."""

    def run(waited_ms: float) -> str:
        result = recall()
        result.timings.embed_ms += waited_ms  # its query's embedding was waited for before (the recall's own: ~0)
        return result.model_dump_json()

    return await embedded_first(grandbo, topic if arm is not Arm.LEXICAL else None, run)
