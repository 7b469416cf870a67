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
from collections.abc import Callable, Collection, Iterable, Mapping
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


# The words of a text as an edit's comparison takes them (`tiers.edit_rules`): an edit signal's summary and details,
# and the note folded from it, hold a changed name as these words lowercased and joined by spaces ("Jane-Roe" as
# "jane roe", "José Müller" as "jos m ller"), so an erasure of the name erases them in that form too.
EDIT_WORD = re.compile(r"[A-Za-z0-9']+")
# What may stand between the words of such a form: none of them, and nothing JSON escapes (a quote, a backslash, a
# control character), so a document's stored JSON holds the form as its value does (`sieves`).
_EDIT_GAP = r"[^A-Za-z0-9'\"\\\x00-\x1f]+"
WORDS_MIN = 4  # letters of a text's words under which its words' form is not erased (it would erase words everywhere)
# Where such a form may start and end: not inside another word, so that `André` (its form `andr`) leaves `android`,
# and `Renée` (`ren e`) `children eat`. A form may start after a JSON escape (`\\n`: its `n` is no letter of the
# value), so that a document's stored JSON holds the form wherever its value does (`sieves`).
_EDIT_START = r"(?:(?<![A-Za-z0-9])|(?<=\\[bfnrt]))"
_EDIT_END = r"(?![A-Za-z0-9])"


def _spelled(text: str) -> str | None:
    """The pattern of `text`'s words' form (`EDIT_WORD`) when it differs from the text itself: the words, any gap
    between them, whole (`_EDIT_START`, `_EDIT_END`); None when the text is one word, or its words hold under
    WORDS_MIN letters."""
    words = EDIT_WORD.findall(text)
    if sum(map(len, words)) < WORDS_MIN or words == [text]:
        return None
    return f"{_EDIT_START}{_EDIT_GAP.join(map(re.escape, words))}{_EDIT_END}"


def erasure_pattern(text: str, *, exact: bool = False) -> re.Pattern[str]:
    """What an erasure of `text` (`grandbo purge-text`) matches: the text itself, in any case (Unicode simple
    case folding: `ACME`, `Acme` and `acme` alike) unless `exact`, and (unless `exact`) its words however they are
    separated, as an edit's comparison writes them (`EDIT_WORD`: `Jane-Roe` erases `jane roe` too)."""
    if exact:
        return re.compile(re.escape(text))
    spelled = _spelled(text)
    return re.compile(re.escape(text) if spelled is None else f"{re.escape(text)}|{spelled}", re.IGNORECASE)


def sieves(text: str) -> bool:
    """Whether `erasure_pattern(text)` finds the text in a document's stored JSON text wherever the document holds
    it: the text has no character JSON escapes (a quote, a backslash, a control character), so each of its
    characters is written as it is (the store's JSON leaves the rest, non-ASCII too, unescaped); nor does the gap
    between the words of its words' form (`_EDIT_GAP`)."""
    return not any(c in '"\\' or ord(c) < 0x20 for c in text)


def erasure_probe(text: str, *, exact: bool = False) -> str:
    """The longest run of `text` that the stored JSON of a record holding the text holds too, in a case the database
    folds as Python does: ASCII, no character JSON escapes, and none of the letters i, k and s, which Python's
    case-insensitive match also finds as a dotless i, the Kelvin sign and the long s; unless `exact`, within one of
    its words when the erasure matches its words' form too (`erasure_pattern`). "" (every record read) when the
    longest is under PROBE_CHARS. A filter an erasure asks the database for (`Dialect.folded`), then matches."""
    runs = re.split(r"[^\x20-\x7e]|[\"\\iksIKS]", text)
    if not exact and _spelled(text) is not None:
        runs = [word for run in runs for word in EDIT_WORD.findall(run)]
    longest = max(runs, key=len, default="")
    return longest if len(longest) >= PROBE_CHARS else ""


PROBE_CHARS = 3  # the shortest run of a text the database is asked to filter an erasure's reads by
PURGED_TEXT = "[purged]"


# A time as Grandbo writes one (an aware ISO 8601 timestamp): a document's shape, not anyone's text. Erasing
# the digits of a phone or card number from one made the document unreadable (every listing a traceback).
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


def erase_text(value: Any, pattern: re.Pattern[str], *, own_id: str | None = None) -> Any:
    """`value` (JSON) with every match of `pattern` in its strings, keys included, replaced by "[purged]";
    timestamps and digests (`*_hash` fields: an API key's hash, which erasing would silently revoke) are left
    as they are, and so is the document's own id (`own_id`) in its top-level `id`: the store cannot rename a
    document, as a purged entry keeps its id, and an incident whose `id` no longer named it was listed under
    an id that found nothing."""
    erased = _erased(value, pattern)
    if own_id is not None and isinstance(value, dict) and value.get("id") == own_id and isinstance(erased, dict):
        erased["id"] = own_id
    return erased


def _erased(value: Any, pattern: re.Pattern[str]) -> Any:
    if isinstance(value, str):
        return value if _STAMP.fullmatch(value) else pattern.sub(PURGED_TEXT, value)
    if isinstance(value, list):
        return [_erased(item, pattern) for item in value]
    if isinstance(value, dict):
        return {
            _erased(key, pattern): item if str(key).endswith("_hash") else _erased(item, pattern)
            for key, item in value.items()
        }
    return value


ERASURES = "erasures"
"""The collection of the erasures' audit records. A purge of text writes one, and so does a purge of an entry that
rewrote copies of its text in documents. Both rewrite documents in place, each at its next version but without an
event of its own (`store.sql.erasing.BUMPED`), so a collection's version does not move: a reader that keeps an org's
documents reads them again when this collection's version moves."""


def entry_erased(value: Any, entry_id: str | Collection[str]) -> Any:
    """`value` (JSON: a document, or an event of its history) without the copies it holds of entry `entry_id`'s text (of
    each entry, given several ids: one walk for a batch of purges), once the entry is purged: a received alert keeps
    what recall and its plan said, quoting the memories they rest on. Each copy is known by its shape, not by its text
    (a kept body is cut short; a plan quotes a line of it): a memory (`id`, `kind`, `title`, `body`) reads as the purged
    entry does (title "[purged]", no body, tags or meta); a citation (`rank`) or runbook suggestion (`win_rate`) of it
    loses its title and steps; a mechanism or a narrative step citing it (`cites`, `text`) its text, and a narrative
    with such a step its summary (the LLM wrote it from them). Anything else, ids included, is left as it is."""
    return _entries_erased(value, frozenset([entry_id] if isinstance(entry_id, str) else entry_id))


def _cites(value: Any, ids: frozenset[str]) -> bool:
    return isinstance(value, list) and any(isinstance(cited, str) and cited in ids for cited in value)


def _entries_erased(value: Any, ids: frozenset[str]) -> Any:
    if isinstance(value, list):
        return [_entries_erased(item, ids) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: _entries_erased(item, ids) for key, item in value.items()}
    if (
        isinstance(out.get("id"), str)
        and out["id"] in ids
        and "title" in out
        and ({"kind", "body"} <= out.keys() or {"rank", "win_rate"} & out.keys())
    ):
        out["title"] = PURGED_TEXT
        for key, empty in (("body", ""), ("tags", []), ("meta", {}), ("steps", [])):
            if key in out:
                out[key] = empty
    if _cites(out.get("cites"), ids) and isinstance(out.get("text"), str):
        out["text"] = PURGED_TEXT
    steps = out.get("steps")
    if (
        isinstance(out.get("summary"), str)
        and isinstance(steps, list)
        and any(isinstance(step, dict) and _cites(step.get("cites"), ids) for step in steps)
    ):
        out["summary"] = PURGED_TEXT
    return out
