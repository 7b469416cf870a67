"""The engine redaction masks with: RE2 patterns (`google-re2`), searched in time linear in the text whatever the
pattern, over an ASCII shadow of the text, so that `\\s`, `\\d`, `\\w` and `\\b` mean what Python's did in every
script; a match is checked and masked in the text itself. An organization's own patterns are bounded: in size when
they are set (`MAX_PROGRAM`), in CPU time when they run (`OWN_PATTERN_SECONDS`)."""

from __future__ import annotations

import bisect
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import re2

from grandbo.errors import InvalidInputError


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is reported to whoever gave it, not printed on stderr
    return options


_RE2 = _options()


def compiled(pattern: str) -> Any:
    """`pattern` compiled by RE2 (raises `re2.error`); matched against UTF-8 bytes."""
    return re2.compile(pattern, _RE2)


class _Shadow(dict[int, str]):
    """What each character is to a pattern, as one ASCII character: Python's `\\s`, `\\d` and `\\w` are Unicode
    and RE2's are ASCII, so a pattern is searched in a shadow of the text in which every other space is a form
    feed (a space to `\\s`, not the literal space of a card number's or a token's separators),
    every other decimal digit `0`, every other letter or number `a` (the dotted and dotless i of Turkish and the
    long s their ASCII letter, which Python's case-insensitive match takes them for) and every other character
    U+0001 (no word, no space, in no class a pattern lists). One character for one, so a match's offsets in the
    shadow are its offsets in the text; what a match is checked and masked by is the text itself."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        if code < 0x80 and char not in _ASCII_SPACES:
            shade = char
        elif char.isspace():
            shade = "\f"
        elif char.isdecimal():
            shade = "0"
        elif char in _ASCII_FOLD:
            shade = _ASCII_FOLD[char]
        elif char.isalnum():
            shade = "a"
        else:
            shade = "\x01"
        self[code] = shade
        return shade


_ASCII_FOLD = {"\u0130": "I", "\u0131": "i", "\u017f": "s", "\u212a": "K"}
_SHADOW = _Shadow()


def shadow(text: str) -> str:
    """The ASCII shadow a pattern is searched in (see `_Shadow`)."""
    if text.isascii() and not _ascii_space(text):
        return text
    return text.translate(_SHADOW)


_ASCII_SPACES = frozenset("\x0b\x1c\x1d\x1e\x1f")  # spaces to Python's `\\s`, not to RE2's


def _ascii_space(text: str) -> bool:
    """Whether `text` holds one of `_ASCII_SPACES`: five scans in C (90 ns for 400 characters; the set's
    intersection hashed each character, 2.7 us)."""
    return "\x0b" in text or "\x1c" in text or "\x1d" in text or "\x1e" in text or "\x1f" in text


class PatternTooSlowError(InvalidInputError):
    """An organization's own patterns searched one value for longer than `OWN_PATTERN_SECONDS` of CPU."""


OWN_PATTERN_SECONDS = 0.5  # of this thread's CPU, per masked value, for all of an organization's own patterns
MAX_PROGRAM = 300  # RE2 instructions an organization's pattern may compile to (a search's cost per character)


@dataclass(frozen=True)
class Pattern:
    """A named RE2 pattern. The match proper is group `m` of a default pattern that has one (the rest of the match
    is context that a look-around would have checked), else the whole match; its group `secret`, when the pattern
    has one, is the part masked. `check` confirms a candidate (a Luhn sum, a parseable address); a candidate it
    refuses stays as it is and the scan goes on after it. A match meets the masks already in the text as `Mask`
    says: one that starts inside a mask the text held is no match (the scan goes on after it), one that ends inside
    a mask or holds masks takes them whole. So a masked text is masked to itself whatever the patterns (an own
    pattern `q` masked the `q` of `[REDACTED:q]` each time), and a secret around a mask
    (`user:xx-[REDACTED:github_token]@`) is masked whole."""

    name: str
    regex: Any  # re2._Regexp (the package ships no types)
    check: Callable[[str], bool] | None = None
    needs: tuple[str, ...] = ()  # one of these is in every match (in lower case when `lower`): a fast skip
    lower: bool = False
    own: bool = False  # an organization's pattern: bounded in CPU time, its groups other than `secret` plain
    sign: str | None = None  # what every match holds, without the long counted repeats (see `Screen`)
    whole: int = field(init=False)
    secret: int | None = field(init=False)

    def __post_init__(self) -> None:
        groups = self.regex.groupindex
        object.__setattr__(self, "whole", 0 if self.own else groups.get("m", 0))
        object.__setattr__(self, "secret", groups.get("secret"))

    def may_match(self, text: str, lowered: str) -> bool:
        if not self.needs:
            return True
        haystack = lowered if self.lower else text
        return any(needle in haystack for needle in self.needs)

    def sub(self, text: str, shade: str, budget: Budget, kept: Sequence[Mask] = ()) -> tuple[str, str, list[Mask]]:
        """`text` with every match masked, its shadow (`shade` is the shadow of `text`), and the masks in it after
        (`kept`: those in it before, in order; see `Mask`)."""
        started = time.thread_time()
        try:
            return self._sub(text, shade, budget, started, kept)
        finally:
            if self.own:
                budget.left -= time.thread_time() - started

    def _sub(
        self, text: str, shade: str, budget: Budget, started: float, kept: Sequence[Mask]
    ) -> tuple[str, str, list[Mask]]:
        token = f"[REDACTED:{self.name}]"
        data = shade.encode("ascii")
        kept_starts = [mask.start for mask in kept]
        pieces: list[tuple[int, int, str]] = []  # (start, end, replacement) in the text, in order
        position, size = 0, len(data)
        while position <= size:
            if self.own and time.thread_time() - started > budget.left:
                raise _too_slow(self.name)
            found = self.regex.search(data, position)
            if found is None:
                break
            start, end = found.span(self.whole)
            secret = found.span(self.secret) if self.secret is not None else (-1, -1)
            part = secret if secret[0] >= 0 else (start, end)  # what is masked
            if end <= start:
                position = max(start, position) + 1  # as a failed look-ahead: try again one character on
                continue
            if (holder := _holding(kept, kept_starts, part[0])) is not None:  # it starts in a mask
                if not (holder.made and part[1] > holder.end):  # masked already
                    position = holder.end
                    continue
                part = (holder.start, part[1])  # a secret whose start an earlier pattern masked: the rest goes too
            if (cut := _holding(kept, kept_starts, part[1] - 1)) is not None:  # it ends in one: the mask goes whole
                part = (part[0], cut.end)
            position = max(end, part[1])
            if self.check is not None and not self.check(text[start:end]):
                continue
            pieces.append((part[0], part[1], token))
        if not pieces:
            return text, shade, list(kept)
        return _replaced(text, pieces), _replaced(shade, pieces), _moved(kept, pieces)


class Screen:
    """Which of some patterns match anywhere in a shadow, found in one RE2 pass (an `RE2::Set`, searched with the
    GIL released) instead of a prefilter and a search for each: most texts hold nothing to mask, and the defaults'
    prefilters let through most texts (`card_number` has none, `ipv4` needs a dot). A pattern the screen does not
    name has no match, so its `sub` would change nothing and is skipped; one it names is masked as ever. The set
    also holds `\\z`, which matches only once the pass reached the end of the text: a pass whose DFA ran out of
    memory (RE2 then reports no match at all) lacks it, and every pattern is searched as before (`None`).

    A pattern with a `sign` is screened by it: a pattern that every match of the pattern matches too, without its
    long counted repeats (`{20,}`, `{3,200}`). The set's DFA follows every pattern at every offset at once, and
    repeats that begin at several offsets of a hostile text (`token=xtoken=xxtoken=`) made it a new state for
    nearly each byte: 1.8 us a byte, seven times the searches it saves."""

    def __init__(self, patterns: Sequence[Pattern]) -> None:
        self._set = re2.Set.SearchSet(_RE2)
        for pattern in patterns:
            self._set.Add(pattern.sign or pattern.regex.pattern)
        self._end = self._set.Add(r"\z")
        self._set.Compile()

    def matching(self, shade: str) -> frozenset[int] | None:
        """The indices (in the order given) of the patterns with a match in `shade`; None when the pass failed."""
        found = self._set.Match(shade.encode("ascii"))
        return frozenset(found) if found is not None and self._end in found else None


class Budget:
    """The CPU seconds an organization's own patterns may still spend on one value (a write's fields, an alert, a
    prompt): thread time, so neither the default patterns nor waiting for the GIL count against it."""

    def __init__(self) -> None:
        self.left = OWN_PATTERN_SECONDS


def mask_finder(names: Iterable[str]) -> re.Pattern[str]:
    """What finds the masks of the patterns `names` in a text: those masks only, so that a key written as one
    (`[REDACTED:sk-abcdefghijklmnopqrstuvwx]`) is still masked. A real mask's text typed before a secret
    (`password=[REDACTED:email]hunter2`) still keeps `secret_value` off it, as its `(?!\\[REDACTED)` did."""
    return re.compile(r"\[REDACTED:(?:" + "|".join(map(re.escape, sorted(set(names)))) + r")\]")


class Mask(NamedTuple):
    """A mask in a text being masked: its span, and whether a pattern made it in this pass (`made`) or the text
    held it already. A match that starts inside a mask the text held is no match (a masked text is masked to
    itself); one that starts inside a mask made in this pass and runs past it takes it with it (the rest of a
    secret whose start an earlier pattern masked: a URL's password that began with a token)."""

    start: int
    end: int
    made: bool = False


def masks(text: str, finder: re.Pattern[str]) -> list[Mask]:
    """The masks (`finder`'s) already in `text`, in order."""
    return [Mask(*found.span()) for found in finder.finditer(text)] if "[REDACTED:" in text else []


def _holding(kept: Sequence[Mask], starts: list[int], at: int) -> Mask | None:
    """The mask in `kept` (in order) that holds the character at `at`, if one does."""
    index = bisect.bisect_right(starts, at) - 1  # the last mask that starts at or before it
    return kept[index] if index >= 0 and kept[index].end > at else None


def _moved(kept: Sequence[Mask], pieces: Sequence[tuple[int, int, str]]) -> list[Mask]:
    """The masks after `pieces` replaced their spans (in order, disjoint): those left whole moved by what came
    before them, those a piece took gone, and each piece's own, made in this pass. One walk of both."""
    out: list[Mask] = []
    shift, at = 0, 0  # what the pieces placed so far added, and the next piece

    def place_pieces(until: float) -> None:  # each piece that ends by `until`, as the mask it made
        nonlocal shift, at
        while at < len(pieces) and pieces[at][1] <= until:
            start, end, token = pieces[at]
            out.append(Mask(start + shift, start + shift + len(token), True))
            shift, at = shift + len(token) - (end - start), at + 1

    for mask in kept:
        place_pieces(mask.start)
        if at < len(pieces) and pieces[at][0] < mask.end:
            continue  # a piece took it
        out.append(Mask(mask.start + shift, mask.end + shift, mask.made))
    place_pieces(math.inf)
    return out


def _replaced(text: str, pieces: list[tuple[int, int, str]]) -> str:
    out, done = [], 0
    for start, end, replacement in pieces:
        out += [text[done:start], replacement]
        done = end
    out.append(text[done:])
    return "".join(out)


def _too_slow(name: str) -> PatternTooSlowError:
    return PatternTooSlowError(
        f"The organization's redaction patterns searched this text for more than {OWN_PATTERN_SECONDS} s of CPU "
        f"(the last, {name!r}, reads far ahead from each match), so nothing was written. An admin makes the pattern "
        f"match less (anchor it, bound its repeats) or removes it: grandbo settings redaction --remove {name}.",
        detail={"pattern": name, "seconds": OWN_PATTERN_SECONDS},
    )
