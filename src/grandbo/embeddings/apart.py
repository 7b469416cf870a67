"""A batch the provider refused, asked again in halves down to the texts at fault: the one driver of the embed
worker's batches (`worker.EmbedWorker`) and the query batcher's (`batching.QueryBatcher`).

A provider refuses a whole request for one text in it (HTTP 400: too long for the model, a content filter) or answers
it unusably in one place (one vector NaN), and a batch holds every org's texts of the moment: one org's text failed
the others' with it (probe 31). Such a batch (`texts_fault`) is asked again in halves, each half's answer settled as
it comes, and a half that failed halved again, down to the texts at fault. Not for an outage nor an account refused
(every half would be): an outage met in a half leaves the half not asked yet to its caller (`give_back`). When both
halves fail and a text of no tenant's (`CANARY`) fails alone too, the provider refuses every request (an unsupported
dimension): 4 calls, not 2n-1.

Every provider call starts before the caller's deadline (`until`): a half not asked by then counts the batch's
failure, so a halving that started just before the deadline ends with the call under way, not 2n-1 calls past it.
A caller's settling that fails (a store write refused) gives back every item not settled yet before it is raised:
none of them stays held (an embed job leased) until its lease runs out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import structlog

from grandbo.embeddings.base import texts_fault

log = structlog.get_logger(__name__)

Item = TypeVar("Item")  # one text of a batch, as its caller holds it: an embed job, a waiting query
Answer = TypeVar("Answer")  # the provider's usable answer for a list of items


@dataclass
class Apart(Generic[Item, Answer]):
    """One batch's halving. `ask`: the provider's answer for the items, or its error (raised by nothing);
    `canary`: whether the provider embeds `CANARY` alone; `answered`: settle items with a usable answer; `refused`:
    settle items with an error (the caller counts the attempt); `give_back`: items not asked, after an outage
    (None: `refused` with the outage's error); `until`: the time.monotonic() past which no provider call starts;
    `alone`: settle one item found at fault, the provider having answered a half or `CANARY` meanwhile (a batch of
    one item refused for its text asks `CANARY` then): its error is the text's own, not the provider's state (None:
    `refused`, and no `CANARY` asked for a lone item)."""

    ask: Callable[[list[Item]], Answer | BaseException]
    canary: Callable[[], bool]
    answered: Callable[[list[Item], Answer], None]
    refused: Callable[[list[Item], BaseException], None]
    until: float
    give_back: Callable[[list[Item], BaseException], None] | None = None
    alone: Callable[[list[Item], BaseException], None] | None = None
    _settled: set[int] = field(default_factory=set)  # id() of each item settled or given back

    def run(self, batch: list[Item], caught: BaseException) -> bool:
        """Settle every item of `batch`, which failed whole with `caught` (see the module). Whether every fault was a
        text's and was found within the time: the caller goes on (a worker's claim); else it stops there."""
        try:
            return self._apart(batch, caught, False)
        except BaseException:
            left = [item for item in batch if id(item) not in self._settled]
            if left:
                try:
                    (self.give_back or self.refused)(left, caught)
                except Exception as error:  # the first error is the one to raise; this one is only logged
                    log.warning("embedding.give_back_failed", items=len(left), error=f"{type(error).__name__}")
            raise

    def time_left(self) -> bool:
        return time.monotonic() < self.until

    def _apart(self, batch: list[Item], caught: BaseException, texts: bool, proven: bool = False) -> bool:
        """`texts`: `CANARY` was embedded since the batch failed; `proven`: the provider answered a half or `CANARY`
        since (a half of the batch that failed: all but the first call)."""
        if len(batch) == 1 or not texts_fault(caught) or not self.time_left():
            # One item refused for its text, the provider answering meanwhile: a half, `CANARY`, or (asked alone
            # from the first) `CANARY` now, when the caller settles such items apart (`alone`: the query batcher's).
            own = len(batch) == 1 and texts_fault(caught) and self.alone is not None
            own = own and (proven or texts or (self.time_left() and self.canary()))
            self._refuse(batch, caught, alone=own)
            return len(batch) == 1 and texts_fault(caught)
        halves = [batch[: len(batch) // 2], batch[len(batch) // 2 :]]
        tried: list[tuple[list[Item], Answer | BaseException]] = []
        outage: BaseException | None = None
        for half in halves:
            if not self.time_left():  # no call starts past the deadline
                break
            answer = self.ask(half)
            tried.append((half, answer))
            if isinstance(answer, BaseException) and not texts_fault(answer):
                outage = answer  # every other half would meet it too
                break
        failed = [(half, answer) for half, answer in tried if isinstance(answer, BaseException)]
        whole = len(tried) == 2 and outage is None
        if whole and len(failed) == 2 and not texts:  # refused whatever it holds, or several texts at fault?
            texts = self.time_left() and self.canary()
        for half, answer in tried:  # the halves embedded first: theirs wait for no call of a half refused
            if not isinstance(answer, BaseException):
                self._answer(half, answer)
        untried = [item for half in halves[len(tried) :] for item in half]
        if untried:
            # after an outage, given back; past the deadline, they count the batch's failure, as a whole batch does then
            self._refuse(untried, outage or caught, back=outage is not None)
        if not whole or (len(failed) == 2 and not texts):
            for half, refused in failed:
                self._refuse(half, refused)
            return False
        for number, (half, refused) in enumerate(failed):
            if not self._apart(half, refused, texts, proven=True):
                for other, its in failed[number + 1 :]:
                    self._refuse(other, its)
                return False
        return True

    def _answer(self, items: list[Item], answer: Answer) -> None:
        self.answered(items, answer)
        self._settled.update(id(item) for item in items)

    def _refuse(self, items: list[Item], error: BaseException, *, back: bool = False, alone: bool = False) -> None:
        if alone and self.alone is not None:
            self.alone(items, error)
        else:
            (self.give_back if back and self.give_back is not None else self.refused)(items, error)
        self._settled.update(id(item) for item in items)
