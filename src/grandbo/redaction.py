"""Masking of secrets and personal data before text is stored, embedded, indexed or sent to an LLM.

The default patterns (`DEFAULT_PATTERNS`, documented in README "Redaction"): private key blocks, cloud and
service tokens (AWS access key ids, GitHub, GitLab, Slack, Stripe/OpenAI/Anthropic-style `sk-` keys, Google
API keys, JWTs, `Bearer` tokens), the value of `password=`, `token: ...`, `api_key=...` and the like,
passwords in URLs (`scheme://user:PASSWORD@host`), email addresses, IPv4 and IPv6 addresses (checked by
`ipaddress`), and card numbers (13 to 19 digits that pass the Luhn check). Each match becomes
`[REDACTED:<name>]`; only the secret part of a match is replaced (`password=` stays, its value goes). An
organization adds its own patterns and may switch defaults off by name (`OrgSettings.set_redaction`).

Every pattern runs on RE2 (`google-re2`), whose search takes time linear in the text whatever the pattern: the
text of one write key must never hold the process (a backtracking `url_password` once took 69 s on a 198,000
character body while every organization waited). RE2 has no look-around, so a default that needs to see the
character before or after its match consumes it in a group of its own and the scan goes on from the end of the
match proper (group `m`), which gives the matches the look-around would. An organization's pattern that RE2
cannot run (look-around, back-references, atomic groups) is refused, naming the construct. One search is linear,
but some patterns make each search from a match read far ahead (`a[^x]*x|a` over `aaaa...`), so masking with an
organization's own patterns is also bounded in time (`OWN_PATTERN_SECONDS`): past it the write is refused whole.

Masking is idempotent: a masked text is masked to itself, so a replayed log or a rerun import stays equal.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

import re2

from grandbo.errors import InvalidInputError
from grandbo.masking import MAX_PROGRAM, Budget, Pattern, Screen, compiled, mask_finder, masks, shadow


def _luhn(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


@functools.lru_cache(maxsize=4096)  # a text repeats its candidates: a log of one address, one card
def _card(match: str) -> bool:
    digits = "".join(char for char in match if char.isdecimal())  # any script's digits; spaces of any kind
    return 13 <= len(digits) <= 19 and _luhn(digits) and len(set(digits)) > 1


@functools.lru_cache(maxsize=4096)
def _ip(match: str) -> bool:
    try:
        ipaddress.ip_address(match)
    except ValueError:
        return False
    return True


def _p(
    name: str,
    pattern: str,
    needs: tuple[str, ...] = (),
    check: Callable[[str], bool] | None = None,
    lower: bool = False,
    sign: str | None = None,
) -> Pattern:
    case = "(?i)" if lower else ""
    return Pattern(name, compiled(case + pattern), check, needs, lower, sign=None if sign is None else case + sign)


# A word character of the text: the shadow's ASCII `\w` (see `_Shadow`).
_W = r"\w"

DEFAULT_PATTERNS: tuple[Pattern, ...] = (
    _p(
        "private_key",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\z)",
        ("PRIVATE KEY",),
        sign=r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
    ),
    _p(
        "aws_access_key",
        r"\b(?:AKIA|ASIA|AIDA|AROA)[0-9A-Z]{16}\b",
        ("AKIA", "ASIA", "AIDA", "AROA"),
        sign=r"\b(?:AKIA|ASIA|AIDA|AROA)[0-9A-Z]",
    ),
    _p(
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        sign=r"\b(?:gh[pousr]_[A-Za-z0-9]|github_pat_[A-Za-z0-9_])",
    ),
    _p("gitlab_token", r"\bglpat-[A-Za-z0-9_-]{20,}\b", ("glpat-",), sign=r"\bglpat-[A-Za-z0-9_-]"),
    _p("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b", ("xox",), sign=r"\bxox[abposr]-[A-Za-z0-9-]"),
    _p(
        "api_key",
        r"\b(?:sk|rk|pk)[-_](?:live_|test_|proj-|ant-(?:api\d+-)?)?[A-Za-z0-9_-]{20,}\b",
        ("sk-", "sk_", "rk-", "rk_", "pk-", "pk_"),
        sign=r"\b(?:sk|rk|pk)[-_][A-Za-z0-9_-]",
    ),
    _p("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}\b", ("AIza",), sign=r"\bAIza[0-9A-Za-z_-]"),
    _p(
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        ("eyJ",),
        sign=r"\beyJ[A-Za-z0-9_-]*\.eyJ",
    ),
    _p(
        "bearer_token",
        r"\bBearer\s+(?P<secret>[A-Za-z0-9._~+/-]{16,}=*)",
        ("bearer",),
        lower=True,
        sign=r"\bBearer\s+[A-Za-z0-9._~+/-]",
    ),
    _p("url_password", r"\b[a-z][a-z0-9+.-]*://[^/\s:@]+:(?P<secret>[^@\s/]+)@", ("://",), lower=True),
    _p(
        "secret_value",
        r"\b(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key|client[_-]?secret)"
        r"""\b\s*[:=]\s*(?P<secret>"[^"\n]{1,200}"|'[^'\n]{1,200}'|[^\s"',;&]{3,200})""",
        ("pass", "pwd", "secret", "token", "key"),
        lower=True,
        sign=r"\b(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key|client[_-]?secret)"
        r"\b\s*[:=]",
    ),
    _p("email", r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b", ("@",)),
    _p(
        "card_number",
        # Not inside a word, a path, a query or a longer number: the character before is none of those, and the
        # one after is no digit (nor a dot and a digit), letter, '/', '#' or '-'.
        rf"(?:^|[^{_W}./#?&%+-])(?P<m>\d(?:[ -]?\d){{12,18}})(?:$|[^{_W}/#.-]|\.(?:$|\D))",
        check=_card,
        # Without the character before, every digit starts a candidate and all die together: a screen of few
        # states (with it, the candidates a hostile text keeps alive are any subset of the 19 digits).
        sign=r"\d(?:[ -]?\d){12}",
    ),
    _p(
        "ipv6",
        rf"(?:^|[^{_W}:.])(?P<m>(?:[0-9A-Fa-f]{{0,4}}:){{2,7}}(?:[0-9A-Fa-f]{{1,4}}|(?:\d{{1,3}}\.){{3}}\d{{1,3}})?)"
        rf"(?:$|[^{_W}:])",
        ("::", ":0", ":1", ":2", ":3", ":4", ":5", ":6", ":7", ":8", ":9", ":a", ":b", ":c", ":d", ":e", ":f"),
        check=_ip,
        lower=True,
    ),
    _p("ipv4", rf"(?:^|[^{_W}.])(?P<m>(?:\d{{1,3}}\.){{3}}\d{{1,3}})(?:$|[^{_W}.])", (".",), check=_ip),
)
DEFAULT_NAMES = tuple(pattern.name for pattern in DEFAULT_PATTERNS)
_SCREEN = Screen(DEFAULT_PATTERNS)  # which defaults match a text at all, in one pass
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
MAX_EXTRA = 50

# What RE2 refuses (its message starts so), in words an admin knows, with what to write instead.
_UNSUPPORTED = (
    ("invalid perl operator: (?=", "a look-ahead `(?=...)`", "match the following text too, or drop the condition"),
    ("invalid perl operator: (?!", "a negative look-ahead `(?!...)`", "list the characters allowed instead"),
    ("invalid perl operator: (?<=", "a look-behind `(?<=...)`", "match the preceding text too"),
    ("invalid perl operator: (?<!", "a negative look-behind `(?<!...)`", "list the characters allowed before"),
    ("invalid perl operator: (?>", "an atomic group `(?>...)`", "use a plain group `(?:...)`"),
    ("invalid perl operator: (?P", "a back-reference `(?P=name)`", "repeat the text or class instead"),
    ("bad repetition operator: ", "a possessive repeat (`++`, `*+`)", "drop the second `+`"),
    ("invalid escape sequence: \\Z", "`\\Z`", "write `\\z` for the end of the text"),
)
_BACKREFERENCE = re.compile(r"invalid escape sequence: \\[1-9]")
_OPEN_BOUND = re.compile(r"(?<!\\)\{,\d+\}")  # `{,6}`: a repeat to Python, the literal text to RE2
_EMPTY_PROBES = (b"", b"a", b" ", b"a b", b"-", b"0", b"a\nb")


def described(current: Mapping[str, Any]) -> dict[str, Any]:
    """An organization's redaction settings as its admins see them (CLI and REST alike): its own patterns
    (name -> regex), the defaults it switched off, and the names of every default pattern."""
    return {"own": dict(current["extra"]), "disabled": list(current["disabled"]), "defaults": list(DEFAULT_NAMES)}


def checked_extra(extra: Mapping[str, str]) -> dict[str, str]:
    """An organization's own patterns (name -> regular expression), each compiled by RE2 and named plainly."""
    if len(extra) > MAX_EXTRA:
        raise InvalidInputError(f"At most {MAX_EXTRA} patterns per organization.", detail={"patterns": len(extra)})
    for name, pattern in extra.items():
        if not _NAME.match(name) or name in DEFAULT_NAMES:
            raise InvalidInputError(
                f"Pattern name {name!r}: use lowercase letters, digits, '-' or '_' (up to 40), not a default's name "
                f"({', '.join(DEFAULT_NAMES)}).",
                detail={"name": name},
            )
        if not pattern or len(pattern) > 500:
            raise InvalidInputError(f"Pattern {name!r} must be 1 to 500 characters.", detail={"name": name})
        regex = compiled_own(name, pattern)
        if any((found := regex.search(probe)) is not None and found.start() == found.end() for probe in _EMPTY_PROBES):
            raise InvalidInputError(
                f"Pattern {name!r} matches the empty text (at the start, the end or between two characters, as `\\b` "
                "alone does); make every alternative match at least one character.",
                detail={"name": name},
            )
    return dict(extra)


def compiled_own(name: str, pattern: str) -> Any:
    """An organization's pattern compiled by RE2, or an InvalidInputError that names what RE2 cannot run in
    linear time (look-around, back-references, atomic groups), what RE2 reads otherwise than Python did, what is
    too large to search quickly, or what is not a regular expression at all."""
    if _OPEN_BOUND.search(pattern):
        _refuse(name, "uses a repeat with no lower bound such as `{,6}`, which RE2 reads as the text itself; write "
                "`{0,6}`", "open lower bound")  # fmt: skip
    try:
        regex = compiled(pattern)
    except re2.error as error:
        reason = error.args[0].decode() if error.args and isinstance(error.args[0], bytes) else str(error)
        for message, words, instead in _UNSUPPORTED:
            if reason.startswith(message):
                _refuse(name, f"uses {words}, which cannot run in time linear in the text; {instead}", reason)
        if _BACKREFERENCE.match(reason):
            _refuse(name, "uses a back-reference (`\\1`), which cannot run in time linear in the text", reason)
        _refuse(name, f"is not a valid regular expression: {reason}", reason)
    if regex.programsize > MAX_PROGRAM:
        _refuse(
            name,
            f"compiles to {regex.programsize} steps, more than {MAX_PROGRAM}: a search costs that much for every "
            "character of every write (a large counted repeat such as `{1000}`, or a long list of alternatives); "
            "bound the repeat, or split the list into several patterns",
            "program too large",
        )
    return regex


def _refuse(name: str, why: str, reason: str) -> NoReturn:
    raise InvalidInputError(
        f"Pattern {name!r} {why}. Patterns run on RE2 (https://github.com/google/re2/wiki/Syntax).",
        detail={"name": name, "engine": reason},
    )


class Redactor:
    """Masks every match of its patterns (defaults not disabled, then the organization's own)."""

    def __init__(self, extra: Mapping[str, str] | None = None, disabled: Iterable[str] = ()) -> None:
        off = set(disabled)
        self.patterns = [p for p in DEFAULT_PATTERNS if p.name not in off] + [
            Pattern(name, compiled_own(name, regex), own=True) for name, regex in (extra or {}).items()
        ]
        self._masks = mask_finder([*DEFAULT_NAMES, *(extra or {})])  # a default's masks even where it is off
        # Each pattern with its index in the screen (an organization's own: None, always searched).
        self._screened = [(p, DEFAULT_PATTERNS.index(p) if not p.own else None) for p in self.patterns]
        self._own = any(p.own for p in self.patterns)

    @classmethod
    def of(cls, settings: Mapping[str, Any] | None) -> Redactor:
        """The redactor of an organization's `settings/redaction` record (None: the defaults alone)."""
        data = settings or {}
        return cls(checked_extra(dict(data.get("extra", {}))), list(data.get("disabled", [])))

    def text(self, text: str) -> str:
        return self._text(text, Budget())

    def value(self, value: Any) -> Any:
        """Every string inside a JSON value masked (keys kept)."""
        return self._value(value, Budget())

    def fields(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """An entry's text fields (title, body, tags, meta) masked; the rest as they are."""
        budget = Budget()
        out = dict(record)
        for key in ("title", "body", "tags", "meta"):
            if key in out and out[key] is not None:
                out[key] = self._value(out[key], budget)
        return out

    def _value(self, value: Any, budget: Budget) -> Any:
        if isinstance(value, str):
            return self._text(value, budget)
        if isinstance(value, list):
            return [self._value(item, budget) for item in value]
        if isinstance(value, dict):
            return {key: self._value(item, budget) for key, item in value.items()}
        return value

    def _text(self, text: str, budget: Budget) -> str:
        if not text:
            return text
        shade = shadow(text)
        found = _SCREEN.matching(shade)
        if found is not None and len(found) == 1 and not self._own:
            return text  # no default matches anywhere (the one index is the screen's end): nothing to mask
        lowered = text.lower()
        kept = masks(text, self._masks)
        for pattern, index in self._screened:
            if index is not None and found is not None and index not in found:
                continue  # no match in the text as it is now: its `sub` would change nothing
            if not pattern.may_match(text, lowered):
                continue
            masked, shade, kept = pattern.sub(text, shade, budget, kept)
            if masked is not text and index is not None:  # later defaults meet its masks (a new boundary before a
                found = _SCREEN.matching(shade)  # card number, say): screen the text again
            text = masked
        return text
