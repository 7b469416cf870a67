"""Masking of secrets and personal data before text is stored, embedded, indexed or sent to an LLM.

The default patterns (`DEFAULT_PATTERNS`, documented in README "Redaction"): private key blocks, cloud and
service tokens (AWS access key ids, GitHub, GitLab, Slack, Stripe/OpenAI/Anthropic-style `sk-` keys, Google
API keys, JWTs, `Bearer` tokens), the value of `password=`, `token: ...`, `api_key=...` and the like,
passwords in URLs (`scheme://user:PASSWORD@host`), email addresses, IPv4 and IPv6 addresses (checked by
`ipaddress`), and card numbers (13 to 19 digits that pass the Luhn check). Each match becomes
`[REDACTED:<name>]`; only the secret part of a match is replaced (`password=` stays, its value goes). An
organization adds its own patterns and may switch defaults off by name (`OrgSettings.set_redaction`).

Masking is idempotent: a masked text is masked to itself, so a replayed log or a rerun import stays equal.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from grandbo.errors import InvalidInputError


def _luhn(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _card(match: str) -> bool:
    digits = re.sub(r"[ -]", "", match)
    return 13 <= len(digits) <= 19 and _luhn(digits) and len(set(digits)) > 1


def _ip(match: str) -> bool:
    try:
        ipaddress.ip_address(match)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Pattern:
    """A named pattern; a match's group `secret`, when the pattern has one, is the part masked. `check`
    confirms a candidate (a Luhn sum, a parseable address)."""

    name: str
    regex: re.Pattern[str]
    check: Callable[[str], bool] | None = None
    needs: tuple[str, ...] = ()  # one of these is in every match (in lower case when `lower`): a fast skip
    lower: bool = False

    def may_match(self, text: str, lowered: str) -> bool:
        if not self.needs:
            return True
        haystack = lowered if self.lower else text
        return any(needle in haystack for needle in self.needs)


def _p(
    name: str, pattern: str, needs: tuple[str, ...] = (), check: Callable[[str], bool] | None = None, flags: int = 0
) -> Pattern:
    return Pattern(name, re.compile(pattern, flags), check, needs, bool(flags & re.IGNORECASE))


_VALUE = r"""(?!\[REDACTED)(?P<secret>"[^"\n]{1,200}"|'[^'\n]{1,200}'|[^\s"',;&]{3,200})"""

DEFAULT_PATTERNS: tuple[Pattern, ...] = (
    _p(
        "private_key",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
        ("PRIVATE KEY",),
    ),
    _p("aws_access_key", r"\b(?:AKIA|ASIA|AIDA|AROA)[0-9A-Z]{16}\b", ("AKIA", "ASIA", "AIDA", "AROA")),
    _p(
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _p("gitlab_token", r"\bglpat-[A-Za-z0-9_-]{20,}\b", ("glpat-",)),
    _p("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b", ("xox",)),
    _p(
        "api_key",
        r"\b(?:sk|rk|pk)[-_](?:live_|test_|proj-|ant-(?:api\d+-)?)?[A-Za-z0-9_-]{20,}\b",
        ("sk-", "sk_", "rk-", "rk_", "pk-", "pk_"),
    ),
    _p("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}\b", ("AIza",)),
    _p("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", ("eyJ",)),
    _p("bearer_token", r"\bBearer\s+(?P<secret>[A-Za-z0-9._~+/-]{16,}=*)", ("bearer",), flags=re.IGNORECASE),
    _p(
        "url_password",
        r"\b[a-z][a-z0-9+.-]*://[^/\s:@]+:(?P<secret>[^@\s/]+)@",
        ("://",),
        flags=re.IGNORECASE,
    ),
    _p(
        "secret_value",
        r"\b(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key|client[_-]?secret)"
        r"\b\s*[:=]\s*" + _VALUE,
        ("pass", "pwd", "secret", "token", "key"),
        flags=re.IGNORECASE,
    ),
    _p("email", r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b", ("@",)),
    _p("card_number", r"(?<![\w./#?&%+-])\d(?:[ -]?\d){12,18}(?!\.?\d)(?![\w/#-])", check=_card),
    _p(
        "ipv6",
        r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?(?![\w:])",
        ("::", ":0", ":1", ":2", ":3", ":4", ":5", ":6", ":7", ":8", ":9", ":a", ":b", ":c", ":d", ":e", ":f"),
        check=_ip,
        flags=re.IGNORECASE,
    ),
    _p("ipv4", r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])", (".",), check=_ip),
)
DEFAULT_NAMES = tuple(pattern.name for pattern in DEFAULT_PATTERNS)
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
MAX_EXTRA = 50


def described(current: Mapping[str, Any]) -> dict[str, Any]:
    """An organization's redaction settings as its admins see them (CLI and REST alike): its own patterns
    (name -> regex), the defaults it switched off, and the names of every default pattern."""
    return {"own": dict(current["extra"]), "disabled": list(current["disabled"]), "defaults": list(DEFAULT_NAMES)}


def checked_extra(extra: Mapping[str, str]) -> dict[str, str]:
    """An organization's own patterns (name -> regular expression), each compiled and named plainly."""
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
        try:
            compiled = re.compile(pattern)
        except re.error as error:
            raise InvalidInputError(
                f"Pattern {name!r} is not a valid regular expression: {error}.", detail={"name": name}
            ) from None
        if compiled.search(""):
            raise InvalidInputError(f"Pattern {name!r} matches the empty text.", detail={"name": name})
    return dict(extra)


class Redactor:
    """Masks every match of its patterns (defaults not disabled, then the organization's own)."""

    def __init__(self, extra: Mapping[str, str] | None = None, disabled: Iterable[str] = ()) -> None:
        off = set(disabled)
        self.patterns = [p for p in DEFAULT_PATTERNS if p.name not in off] + [
            Pattern(name, re.compile(regex)) for name, regex in (extra or {}).items()
        ]

    @classmethod
    def of(cls, settings: Mapping[str, Any] | None) -> Redactor:
        """The redactor of an organization's `settings/redaction` record (None: the defaults alone)."""
        data = settings or {}
        return cls(checked_extra(dict(data.get("extra", {}))), list(data.get("disabled", [])))

    def text(self, text: str) -> str:
        if not text:
            return text
        lowered = text.lower()
        for pattern in self.patterns:
            if not pattern.may_match(text, lowered):
                continue
            text = pattern.regex.sub(lambda match, p=pattern: _masked(match, p), text)  # type: ignore[misc]
        return text

    def value(self, value: Any) -> Any:
        """Every string inside a JSON value masked (keys kept)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(item) for item in value]
        if isinstance(value, dict):
            return {key: self.value(item) for key, item in value.items()}
        return value

    def fields(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """An entry's text fields (title, body, tags, meta) masked; the rest as they are."""
        out = dict(record)
        for key in ("title", "body", "tags", "meta"):
            if key in out and out[key] is not None:
                out[key] = self.value(out[key])
        return out


def erasure_pattern(text: str, *, exact: bool = False) -> re.Pattern[str]:
    """What an erasure of `text` (`grandbo purge-text`) matches: the text itself, in any case (Unicode simple
    case folding: `ACME`, `Acme` and `acme` alike) unless `exact`."""
    return re.compile(re.escape(text), 0 if exact else re.IGNORECASE)


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


def _masked(match: re.Match[str], pattern: Pattern) -> str:
    found = match.group(0)
    if pattern.check is not None and not pattern.check(found):
        return found
    token = f"[REDACTED:{pattern.name}]"
    if "secret" in pattern.regex.groupindex and match.group("secret") is not None:
        start, end = match.span("secret")
        offset = match.start()
        return found[: start - offset] + token + found[end - offset :]
    return token
