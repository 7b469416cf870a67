"""Service names: the one form every face keeps and compares them in, and the look-alikes a write may not add.

`service_name` is the normalization: NFKC (fullwidth `ｃｈｅｃｋｏｕｔ` is `checkout`, the micro sign `µ` is Greek
`μ`), invisible format characters removed (a zero-width space, a soft hyphen, a direction mark: `checkout\\u200b-api`
is `checkout-api`), lower case. A zero-width joiner between two emoji is kept: it makes one emoji of them (a
technologist is a person, ZWJ, a laptop), it hides nothing. Every write of a service name (entries, the catalog,
incidents, findings, alerts, changes) and every filter (listings, recall's `services`, the topology) goes through
it, and migration 30 put the names stored before it in the same form, so two names that normalize equal are one.

`look_alike` says why a name would pass for another that it is not: a word mixing scripts (a Cyrillic `с` in
`сheckout-api`). Only a name a write adds is refused (`refuse_added`): one a record kept before carries forward.
Greek letters that Latin words use as symbols (`μ`, `Ω`, `Δ`: `μservice`, `k8s-δt`) and emoji are not a mix.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import AfterValidator

from grandbo.errors import InvalidInputError

_ZWJ = "\u200d"
# Tags spell a subdivision's flag after a waving black flag (England's is U+1F3F4 then tags): part of the emoji.
_TAGS = range(0xE0020, 0xE0080)


def service_name(value: str) -> str:
    """A service's name as it is kept and compared: stripped, NFKC, no invisible format character, lower case."""
    if value.isascii():
        return value.strip().lower()
    text = unicodedata.normalize("NFKC", value)
    if _spaces(text) > _spaces(value):  # a spacing accent (`´` is a space and a mark) or a ligature of words: NFKC
        text = value  # would make words of one name, which no identifier is (one stored so would be unreadable)
    kept = [char for at, char in enumerate(text) if unicodedata.category(char) != "Cf" or _in_emoji(text, at)]
    folded = "".join(kept).strip().lower()
    normal = unicodedata.normalize("NFKC", folded)
    return folded if _spaces(normal) > _spaces(folded) else normal


def _spaces(text: str) -> int:
    return sum(char.isspace() for char in text)


ServiceName = Annotated[str, AfterValidator(service_name)]
"""A field holding one service's name, kept as `service_name` keeps it (and read back so: one stored before is
compared as it is written now)."""


def service_names(values: Iterable[str]) -> list[str]:
    """`service_name` of each, each once, in the order given (one that was only invisible characters is gone)."""
    return [name for name in dict.fromkeys(service_name(value) for value in values) if name]


def _is_emoji(char: str) -> bool:
    return unicodedata.category(char) == "So" or 0x1F3FB <= ord(char) <= 0x1F3FF  # a symbol, or a skin tone


def _in_emoji(text: str, at: int) -> bool:
    """Whether the format character at `at` belongs to an emoji sequence: a joiner between two emoji (a variation
    selector or skin tone may follow the first), or a tag after a flag or another tag."""
    char = text[at]
    if ord(char) in _TAGS:
        before = text[at - 1] if at else ""
        return before == "\U0001f3f4" or (bool(before) and ord(before) in _TAGS)
    if char != _ZWJ or at == 0 or at + 1 >= len(text):
        return False
    back = at - 1
    while back > 0 and (unicodedata.category(text[back]) == "Mn" or 0x1F3FB <= ord(text[back]) <= 0x1F3FF):
        back -= 1  # a variation selector (FE0F) or a skin tone after the emoji
    return _is_emoji(text[back]) and _is_emoji(text[at + 1])


# The scripts UTS #39 lets one identifier mix ("highly restrictive"): Latin with the scripts Japanese, Chinese and
# Korean write beside it. Any other mix (Latin and Cyrillic, Latin and Greek) is how a look-alike is made.
_WRITTEN_TOGETHER = (
    frozenset({"LATIN", "CJK", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "CJK", "BOPOMOFO"}),
    frozenset({"LATIN", "CJK", "HANGUL"}),
)
_SCRIPT_OF_WORD = {"KATAKANA-HIRAGANA": "KATAKANA", "IDEOGRAPHIC": "CJK", "MODIFIER": ""}  # marks of those scripts
# Greek letters Latin words use as symbols (micro, ohm, delta, lambda, pi, sigma, theta, phi, psi), none of which
# looks like a Latin letter: `μservice`, `k8s-δt` are Latin words. (Greek `ο`, `α`, `ν`... would be look-alikes.)
_SYMBOLS = frozenset("μωδλπσςθφψ")


def look_alike(name: str) -> str | None:
    """Why `name` (as `service_name` keeps it) would pass for another service's name, or None."""
    if name.isascii():
        return None
    scripts: set[str] = set()  # of the word read so far: a run of letters, marks and digits
    for char in [*name, "-"]:
        kind = unicodedata.category(char)
        if kind.startswith("L"):
            if char in _SYMBOLS:
                continue
            word = unicodedata.name(char, "").split(" ", 1)[0]
            scripts.add(_SCRIPT_OF_WORD.get(word, word))
        elif not kind.startswith(("M", "N")):  # the word ends
            scripts.discard("")
            if len(scripts) > 1 and not any(scripts <= allowed for allowed in _WRITTEN_TOGETHER):
                return f"mixes {' and '.join(sorted(script.title() for script in scripts))} letters in one word"
            scripts.clear()
    return None


def refuse_added(names: Iterable[str], before: Iterable[str], field: str) -> None:
    """InvalidInputError (422) naming the first of `names` that is not among `before` (the names the record held
    before this write, which it carries forward whatever they are) and is a look-alike (`look_alike`). `before` is
    read only when a name is one (a generator reads the record only then)."""
    suspects = [(name, why) for name in service_names(names) if (why := look_alike(name))]
    kept = set(service_names(before)) if suspects else set()
    for name, why in suspects:
        if name not in kept:
            raise InvalidInputError(
                f"Service name {name!r} in `{field}` {why}, so it looks like another service's name and would "
                "never match it: write each word in one script (the catalog's name, e.g. with Latin letters only).",
                detail={"errors": [{"field": field, "message": f"{name!r} {why}"}], "service": name},
            )


CATALOG = "service"  # the catalog's collection (`tiers.operations.SERVICES`); its documents' ids are the names
NAMED = (CATALOG, "incident", "alert", "alert_group", "change", "outcome")  # the collections holding service names


def stored_names(collection: str, data: Any) -> Any:
    """`data` of a document of `collection` (one of NAMED) with its service names as `service_name` keeps them, or
    None when none changes: what migration 30 did to the documents stored before it, and an import of an export
    made before it does to the documents it brings (`tiers.eventlog`)."""
    if not isinstance(data, dict):
        return None
    new = dict(data)
    if collection == CATALOG:
        _one(new, "name")
        _many(new, "depends_on")
    elif collection == "incident":
        _many(new, "services")
        if isinstance(new.get("findings"), list):
            new["findings"] = [_many(dict(f), "services") if isinstance(f, dict) else f for f in new["findings"]]
    elif collection == "alert":
        if isinstance(new.get("alert"), dict):
            new["alert"] = _one(dict(new["alert"]), "service")
    elif collection == "alert_group":
        _many(new, "services")
        if isinstance(new.get("members"), list):
            new["members"] = [_one(dict(m), "service") if isinstance(m, dict) else m for m in new["members"]]
    else:  # a change, an outcome
        _one(new, "service")
    return new if new != data else None


def _one(data: dict[str, Any], key: str) -> dict[str, Any]:
    if isinstance(value := data.get(key), str) and (name := service_name(value)):
        data[key] = name
    return data


def _many(data: dict[str, Any], key: str) -> dict[str, Any]:
    if isinstance(value := data.get(key), list) and all(isinstance(v, str) for v in value):
        data[key] = service_names(value)
    return data


def merged(kept: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """A catalog service `kept` under its normalized name, given the look-alike `other` that normalizes to it: its
    own fields, with the dependencies, owners and aliases of both."""
    out = dict(kept)
    for key in ("depends_on", "owners", "aliases"):
        both = [*(kept.get(key) or []), *(other.get(key) or [])]
        if both:
            out[key] = list(dict.fromkeys(both))
    return out
