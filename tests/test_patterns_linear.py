"""Every pattern of the write, webhook, import and prompt paths runs in time linear in its input (issue 24, part 2;
redaction, part 1, is `test_redaction_linear.py`). Each module-level pattern of the package, and each literal pattern
a function hands `re` itself, is listed below with the text built against it at its path's limit, or as fixed input
with the reason; a new one without an entry fails `test_every_pattern_has_an_entry`.

Each input aims at backtracking: a long run of what the pattern repeats, with what it needs last missing (a
near-miss every start tries to the end), or many partial matches. Checked by hand, not here: each input held a
backtracking variant of its pattern (or, for the eight patterns fixed with this test, the pattern itself) for
seconds to minutes at a few thousand characters, and runs in milliseconds here. The timeout marks a hang, it times
nothing."""

from __future__ import annotations

import ast
import functools
import importlib
import pathlib
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import re2
import regex

import grandbo
from grandbo.api import clean
from grandbo.api.bodies import MAX_BODY, MAX_WEBHOOK_BODY
from grandbo.history.sources import _fields, markdown
from grandbo.linear import LinearPattern
from grandbo.masking import Pattern as MaskPattern
from grandbo.masking import Screen, shadow
from grandbo.model import MAX_BODY_CHARS
from grandbo.tiers import edit_rules
from grandbo.tiers.learning_model import MAX_EDIT_CHARS
from grandbo.triage import narrate

BODY = MAX_BODY_CHARS  # an entry's body, a history record's text, an import's line
REQUEST = MAX_BODY  # a JSON body, bytes
WEBHOOK = MAX_WEBHOOK_BODY  # an alert delivery, bytes: the largest body `CleanInput` reads
FILE = markdown.MAX_BYTES  # a Markdown post-mortem, which may be one line
NAME = 255  # a file's name (`routes_history.NAME_BYTES`, the file system's)


@dataclass(frozen=True)
class Adversarial:
    """Texts built against a pattern (label: a function of no argument that builds it), and the pattern's use."""

    use: Callable[[Any, Any], object]
    inputs: dict[str, Callable[[], Any]]


@dataclass(frozen=True)
class Fixed:
    """A pattern no user's text reaches, or that the named test covers: why."""

    reason: str


def search(pattern: Any, text: Any) -> object:
    return pattern.search(text)


def match(pattern: Any, text: Any) -> object:
    return pattern.match(text)


def fullmatch(pattern: Any, text: Any) -> object:
    return pattern.fullmatch(text)


def findall(pattern: Any, text: Any) -> object:
    return sum(1 for _ in pattern.finditer(text))


def sub(pattern: Any, text: Any) -> object:
    return pattern.sub(lambda found: found.group(0)[:1], text)


def split(pattern: Any, text: Any) -> object:
    return pattern.split(text)


def lines(use: Callable[[Any, Any], object]) -> Callable[[Any, Any], object]:
    """`use` on each line, as the readers match a line: one long line is the worst case."""
    return lambda pattern, text: [use(pattern, line) for line in text.splitlines()]


def words(use: Callable[[Any, Any], object]) -> Callable[[Any, Any], object]:
    return lambda pattern, text: [use(pattern, word) for word in text.split()]


def runs(text: str, size: int) -> str:
    return text * (size // len(text))


def screened(screen: Any, text: Any) -> object:
    return screen.matching(shadow(text))


def soup(pieces: list[str], size: int) -> str:
    """`pieces` drawn at random (a fixed seed) to `size`: repeats that begin at offsets no period repeats."""
    rng = random.Random(24)
    return "".join(rng.choice(pieces) for _ in range(size))[:size]


def near_miss(text: str, size: int, last: str = "\x01") -> str:
    """`text` repeated to `size`, then the one character the pattern cannot take: every start runs to the end."""
    return runs(text, size - len(last)) + last


def literal_words(text: bytes, size: int) -> bytes:
    return text * (size // len(text))


TEST_REDACTION = "the default redaction patterns: tests/test_redaction_linear.py, at the 1 MiB request limit"
EVAL = "evaluation: an operator's offline run over a data set or the org's own history, on no request path"

# Per pattern, by the module-level name it has in its module (a list's item by its index): the texts built against
# it and its use, or why none is needed.
PATTERNS: dict[str, Adversarial | Fixed] = {
    # api/clean: every JSON body `CleanInput` reads, a webhook's (4 MiB) the largest. Literal prefixes: a run of the
    # literal's start with what must follow it missing makes every position a candidate.
    "grandbo.api.clean._ESCAPES": Adversarial(
        search,
        {
            "backslash_u": lambda: literal_words(b"\\u", WEBHOOK),  # `\u` with no digit after: each one a start
            "high_surrogate_near": lambda: literal_words(b"\\ud7", WEBHOOK),  # `[89a-f]` missed by one
        },
    ),
    "grandbo.api.clean._RAW_SURROGATE": Adversarial(search, {"lead_byte": lambda: literal_words(b"\xed\x9f", WEBHOOK)}),
    "grandbo.api.clean._WORDS": Adversarial(
        search,
        {
            "nan_in_words": lambda: literal_words(b"aNaN", WEBHOOK),  # each `N` found, its look-behind fails
            "infinit": lambda: literal_words(b"Infinit ", WEBHOOK),
            "quoted": lambda: literal_words(b'"NaN"', WEBHOOK),  # the look-ahead fails at each
        },
    ),
    "grandbo.api.clean._DIGITS_OVER": Adversarial(
        search,
        {
            "runs_one_short": lambda: literal_words(b"1" * 4300 + b" ", WEBHOOK),  # each run one digit short
            "minus_runs": lambda: literal_words(b"-1", WEBHOOK),
            "decimals": lambda: literal_words(b"1.", WEBHOOK),  # the look-behind refuses every digit but the first
        },
    ),
    "grandbo.api.clean._BIG": Adversarial(
        lambda pattern, body: clean._overflowing(body),
        {
            "mantissa_no_exponent": lambda: b"9" * WEBHOOK,  # `\d+` to the end, then back for an `e` that is not there
            "two_digit_exponents": lambda: literal_words(b"1.5e99,", WEBHOOK),  # `\d{3,}` missed by one, everywhere
            "runs_short": lambda: literal_words(b"1" * 209 + b".1e", WEBHOOK),  # both arms run and fail
        },
    ),
    "grandbo.api.clean._LONE": Adversarial(
        lambda pattern, body: clean._escape_problem(body),
        {
            "pairs": lambda: literal_words(b"\\ud800\\udc00", WEBHOOK),  # each looks ahead and behind, all paired
            "prefix": lambda: literal_words(b"\\ud8", WEBHOOK),
        },
    ),
    # history: what an import reads, a record's text (200,000 characters) or a Markdown file (5 MiB, one line).
    "grandbo.history.decide._NUMBERED": Adversarial(match, {"digits": lambda: "sev" + "1" * BODY}),
    "grandbo.history.decide._FIRST_WORD": Adversarial(match, {"letters": lambda: near_miss("a", BODY)}),
    "grandbo.history.decide._WORD": Adversarial(findall, {"one_word": lambda: near_miss("a&'.-", BODY)}),
    "grandbo.history.decide._NUMBER": Adversarial(
        fullmatch,
        {
            "digits": lambda: near_miss("1", BODY),  # `\d+` and `\d{4}-` both take the run, then fail at the end
            "month": lambda: "jan" + near_miss("a", BODY),
        },
    ),
    "grandbo.history.decide._SENTENCE_END": Adversarial(split, {"dots_spaces": lambda: runs(". ", BODY)}),
    "grandbo.history.decide._MARKUP": Adversarial(
        sub,
        {
            "spaces_digits": lambda: " " * (BODY // 2) + near_miss("1", BODY // 2),  # `\d+[.)]` fails at the end
            "stars": lambda: runs("*_`", BODY),
        },
    ),
    # Fixed with this test: `\s*\**\s*` split a run of spaces between its two `\s*` every way (14 s: 8,000).
    "grandbo.history.decide._META_LINE": Adversarial(
        lines(match),
        {
            "spaces": lambda: near_miss(" ", FILE),
            "spaces_stars": lambda: near_miss(" *", FILE),
            "spaces_after_word": lambda: "category" + near_miss(" ", FILE),  # the second `\s*...:` missed at the end
        },
    ),
    "grandbo.history.decide._SLUG": Adversarial(sub, {"symbols": lambda: runs("! ", BODY)}),
    "grandbo.history.decide._SAFE_ID": Adversarial(fullmatch, {"long": lambda: "a" * BODY}),  # {1,64}: bounded
    **{
        f"grandbo.history.sources._fields._FINDING_WORDS[{n}][0]": Adversarial(
            search,
            {
                "near": lambda: runs("contributfollow-uaction ite", BODY),  # the literals' prefixes, each a start
            },
        )
        for n in range(len(_fields._FINDING_WORDS))
    },
    # Fixed with this test: `(.+?)\s*$` tried `\s*$` after each character of the title (0.8 s: 8,000 spaces).
    "grandbo.history.sources._fields._HEADING": Adversarial(
        lines(match),
        {
            "trailing_spaces": lambda: "# a" + near_miss(" ", FILE, "x"),
            "only_spaces": lambda: "#" + " " * FILE,
            "hashes": lambda: "# " + runs("# ", FILE),
        },
    ),
    "grandbo.history.sources._markdown_body._NUMBERING": Adversarial(
        sub,
        {
            "dotted": lambda: near_miss("1.", BODY),  # `\d+(?:\.\d+)*` then `\s+` missed at the end
            "roman": lambda: near_miss("i", BODY),
            "section": lambda: "section" + near_miss(" ", BODY),
        },
    ),
    "grandbo.history.sources._markdown_body._MARKER": Adversarial(sub, {"spaces": lambda: near_miss(" ", BODY)}),
    "grandbo.history.sources._markdown_body._CHECKBOX": Adversarial(sub, {"spaces": lambda: "[x]" + " " * BODY}),
    # Fixed with this test: `(.*?)[\s*_]*$` tried `[\s*_]*$` after each character of the value (0.8 s: 8,000).
    "grandbo.history.sources._markdown_body._FIELD": Adversarial(
        lines(match),
        {
            "trailing_spaces": lambda: "a: b" + near_miss(" ", FILE),
            "trailing_marks": lambda: "a: b" + near_miss(" *_", FILE),
            "name_spaces": lambda: "a" + near_miss(" ", FILE),  # the name's `{0,40}?` tries each length to the end
        },
    ),
    # Fixed with this test (RE2): each `(` was tried to the end of a heading (0.26 s for 8,000 of them).
    "grandbo.history.sources._markdown_body._PARENS": Adversarial(sub, {"open": lambda: "(" * FILE}),
    **{
        f"grandbo.history.sources.incidentio.{name}": Adversarial(
            search, {"near": lambda: runs("impact-stardet", BODY)}
        )
        for name in (
            "_SERVICES",
            "_STARTED[0]",
            "_STARTED[1]",
            "_STARTED[2]",
            "_RESOLVED[0]",
            "_RESOLVED[1]",
            "_MITIGATED",
        )
    },
    # Fixed with this test: `[_.-]*` before `[\w.-]*[_.-]` split a run of `._` every way (29 ms for 255 bytes).
    "grandbo.history.sources.markdown._TEMPLATE": Adversarial(
        fullmatch,
        {
            "dots": lambda: near_miss("._", NAME, "x"),
            "long": lambda: runs("._", BODY) + "templat",  # past a name's limit: linear whatever the length
        },
    ),
    "grandbo.history.sources.markdown._FILE_DATE": Adversarial(search, {"digits": lambda: runs("2024-01-", BODY)}),
    "grandbo.history.sources.markdown._LEADING_DATE": Adversarial(
        match,
        {
            "spaces": lambda: "2024-01-01" + near_miss(" ", BODY),
        },
    ),
    # Fixed with this test: `\s*\b(UTC|GMT)$` tried each space of a run against the rest of it (6.6 s: 8,000).
    "grandbo.history.sources.markdown._ZONE_NAME": Adversarial(
        lambda pattern, text: markdown._when(text),
        {
            "spaces": lambda: "1" + near_miss(" ", BODY, "x"),
            "zones": lambda: runs("UTC ", BODY) + "x",
        },
    ),
    "grandbo.history.sources.markdown._WEEKDAY": Adversarial(sub, {"letters": lambda: "mon" + near_miss("a", BODY)}),
    # Fixed with this test (RE2): each `[` was tried to the end (1.3 s for 8,000 of them).
    "grandbo.history.sources.markdown._LINK": Adversarial(
        sub,
        {
            "open_brackets": lambda: "[" * FILE,
            "open_links": lambda: runs("<https://", FILE),
            "unclosed_target": lambda: "[a](" + "x" * FILE,  # `[^)\s]+[^)]*` split every way
            "many": lambda: runs("[a](b) ", BODY),  # a match per 7 characters: the cost is per match, not a search
        },
    ),
    # Fixed with this test (RE2): a heading of 2,000 spaces before its last word took 66 s; blank lines, each tried
    # to the end of the text.
    "grandbo.history.sources._rows._HEADING": Adversarial(
        search,
        {
            "trailing_spaces": lambda: "# a" + near_miss(" ", BODY, "x"),
            "trailing_hashes": lambda: "# a" + near_miss(" #", BODY, "x"),
            "blank_lines": lambda: "\n" * BODY,
        },
    ),
    "grandbo.mcp.answers._SENTENCE": Adversarial(
        split,
        {
            "spaces": lambda: "." + near_miss(" ", BODY, "x"),
            "newlines": lambda: "\n" * BODY,
        },
    ),
    # identifiers: anchored and bounded, tried at the longest text a field holds
    "grandbo.model.ORG_ID_PATTERN": Adversarial(fullmatch, {"long": lambda: "a" * BODY}),
    "grandbo.model.ENTRY_ID_PATTERN": Adversarial(fullmatch, {"long": lambda: "a" * BODY}),
    **{f"grandbo.redaction.DEFAULT_PATTERNS[{n}].regex": Fixed(TEST_REDACTION) for n in range(15)},
    # One pass for every default at once (its DFA follows each at every offset): counted repeats begun at many
    # offsets made it a new state a byte (the full patterns: 2 s for a MiB of the first); the signs keep it few (0.01 s).
    "grandbo.redaction._SCREEN": Adversarial(
        screened,
        {
            "values": lambda: soup(["token=", "x", "x", "y"], REQUEST),
            "digits": lambda: soup(list("0123456789 -"), REQUEST),
            "keys": lambda: soup(
                ["sk-", "glpat-", "xoxb-", "ghp_", "AIza", "eyJ", "Bearer ", "a", "1", "-", "."], REQUEST
            ),
            "addresses": lambda: soup([*"0123456789abcdef", ":", "::", ".", " "], REQUEST),
            "mixed": lambda: soup(
                ["token=", "ghp_", "sk-", "eyJ", "@", ".", ":", "://", "a", "1", " ", "-", "_"], REQUEST
            ),
        },
    ),
    "grandbo.redaction._NAME": Adversarial(match, {"long": lambda: "a" * BODY}),
    "grandbo.redaction._BACKREFERENCE": Fixed("matches RE2's error message, whose text RE2 writes"),
    "grandbo.redaction._OPEN_BOUND": Adversarial(search, {"braces": lambda: runs("{,1", REQUEST)}),  # an admin's
    "grandbo.erased._STAMP": Adversarial(fullmatch, {"digits": lambda: "2024-01-01T00:00:00." + "1" * BODY}),
    # retrieval: every entry's text is tokenized (200,000 characters), and every topic (4,000)
    "grandbo.retrieval.text._RAW_TOKEN": Adversarial(
        findall,
        {
            "connected": lambda: near_miss("a-", BODY, "-"),  # `(?:[-_./:]\w+)*` ends on a connector
            "cjk": lambda: runs("漢a", BODY),
        },
    ),
    "grandbo.retrieval.text._ASCII_TOKEN": Adversarial(findall, {"connected": lambda: near_miss("a.", BODY, ".")}),
    "grandbo.retrieval.text._CJK_RUN": Adversarial(match, {"cjk": lambda: "漢" * BODY}),
    "grandbo.retrieval.text._CJK_RUNS": Adversarial(findall, {"cjk": lambda: runs("漢a", BODY)}),
    "grandbo.retrieval.text._CONNECTOR": Adversarial(split, {"connectors": lambda: runs("a-", BODY)}),
    "grandbo.retrieval.text._CAMEL_PART": Adversarial(
        findall,
        {
            "upper": lambda: "A" * BODY,  # `\p{Lu}+(?=\p{Lu}\p{Ll})` backs off the whole run
            "upper_lower": lambda: runs("AAb", BODY),
        },
    ),
    "grandbo.retrieval.text._HAS_INNER_UPPER": Adversarial(search, {"upper": lambda: runs("AA1", BODY)}),
    "grandbo.retrieval.text._WORDS": Adversarial(findall, {"connected": lambda: near_miss("a:", BODY, ":")}),
    "grandbo.retrieval.text._PARTS": Adversarial(findall, {"underscores": lambda: runs("a_", BODY)}),
    "grandbo.tiers.context._PAIR": Adversarial(
        findall,
        {
            "quotes": lambda: "'" + "a" * MAX_EDIT_CHARS,  # one open quote: `[^']+` to the end
            "pairs": lambda: runs("'a' instead of 'b", MAX_EDIT_CHARS),  # every pair missing its closing quote
        },
    ),
    # A webhook body's brackets, all of them (4 MiB): two two-byte literals, nothing to backtrack; the near-miss is
    # every opener with no closer beside it
    "grandbo.jsontext._INNERMOST": Adversarial(findall, {"openers": lambda: b"[{" * (MAX_WEBHOOK_BODY // 2)}),
    "grandbo.erased.EDIT_WORD": Adversarial(findall, {"words": lambda: runs("a'", MAX_EDIT_CHARS)}),
    "grandbo.tiers.edit_rules._SENTENCE": Adversarial(
        findall,
        {
            "stops": lambda: "." * MAX_EDIT_CHARS,
            "one_sentence": lambda: "a" * MAX_EDIT_CHARS,
        },
    ),
    "grandbo.tiers.erasure._FIELD_NAME": Adversarial(fullmatch, {"long": lambda: near_miss("a_", BODY, "-")}),
    "grandbo.tiers.runbooks._NUMBERED": Adversarial(
        findall,
        {
            "steps": lambda: runs(" 1.", BODY),  # each a start, `\s+` missed
            "spaces": lambda: "1." + near_miss(" ", BODY, ""),
        },
    ),
    "grandbo.figures.INCIDENT_ID": Adversarial(search, {"near": lambda: runs("INC-1a", BODY)}),
    # prompt path: a model's answer is read sentence by sentence, at an entry's length
    "grandbo.triage.narrate._ID_LIKE": Adversarial(
        findall,
        {
            "upper": lambda: near_miss("A", BODY, "a"),  # `[A-Z0-9]*` to the end, no `-` group
            "groups": lambda: runs("A-", BODY) + "a",  # the last group's `\b` fails, each group given back
            "words": lambda: runs("A1 ", BODY),
        },
    ),
    "grandbo.values._IDENTIFIER": Adversarial(match, {"long": lambda: "a" * BODY}),
    # a change's time: a run of spaces, then no zero year (matched once, from the start)
    "grandbo.values._GO_ZERO": Adversarial(match, {"spaces": lambda: near_miss(" ", BODY)}),
    "grandbo.store.postgres.backup._CREATE_TABLE": Fixed("reads the SQL of Grandbo's own migrations"),
    "grandbo.values._ISO_DATE": Adversarial(match, {"digits": lambda: "1" * BODY}),
    "grandbo.values._SURROGATE": Adversarial(search, {"text": lambda: "a" * BODY}),
    "grandbo.eval.beir._SURROGATE": Fixed(EVAL),
    **{
        f"grandbo.eval.history.{name}": Fixed(EVAL)
        for name in (
            "_HEADING",
            "_LEARNED_HEADING",
            "_LABEL",
            "_LEARNED_LABEL",
            "_META_LABEL",
            "_WORD",
            "_WORDS",
            "_SENTENCE",
        )
    },
    "grandbo.eval.orgs._NEW": Fixed("matches the names of organizations evaluation runs made"),
    **{
        f"grandbo.eval.public_incidents.{name}": Fixed(EVAL)
        for name in ("_WORD", "_LINK", "_SENTENCE", "_META", "_ROOT")
    },
}

# Literal patterns a function hands `re` itself, by (module, pattern): the same table's entries.
CALLS: dict[tuple[str, str], Adversarial | Fixed] = {
    ("grandbo.history.decide", r"[\s_-]+"): Adversarial(
        lambda pattern, text: re.sub(pattern, "", text),
        {
            "separators": lambda: runs(" _-", BODY),
        },
    ),
    ("grandbo.history.sources._markdown_body", r"[^a-z0-9;]+"): Adversarial(
        lambda p, text: re.sub(p, " ", text),
        {
            "symbols": lambda: runs("!a", BODY),
        },
    ),
    ("grandbo.history.sources._markdown_body", r"^[^\w]+"): Adversarial(
        lambda p, text: re.sub(p, "", text),
        {
            "symbols": lambda: near_miss("!", BODY, "a"),
        },
    ),
    # a `--map` column's name: one character class repeated, no nesting (a run of it, broken at the end)
    ("grandbo.history.sources.tabular", r"[A-Za-z0-9 _.-]+"): Adversarial(
        lambda p, text: re.findall(p, text), {"one_run": lambda: near_miss("a", BODY, "!")}
    ),
    ("grandbo.history.sources._rows", r"[,;]"): Adversarial(
        lambda p, text: re.split(p, text),
        {
            "separators": lambda: ",;" * BODY,
        },
    ),
    ("grandbo.history.sources.markdown", r"[,;]"): Adversarial(
        lambda p, text: markdown._words(text),
        {
            "separators": lambda: runs("[a,;", BODY),  # each item's links: short items, the cost per item
        },
    ),
    ("grandbo.web.triage", r"\w+"): Adversarial(
        lambda p, text: re.findall(p, text), {"words": lambda: runs("a ", BODY)}
    ),
    ("grandbo.eval.public_incidents", r"\d{4}-\d{2}-\d{2}"): Fixed(EVAL),
    ("grandbo.tiers.edit_rules", r"\n\s*\n"): Adversarial(
        lambda p, text: edit_rules._shape(text),
        {
            "indented_lines": lambda: runs("\n" + " " * 50 + "x", MAX_EDIT_CHARS),  # each `\n\s*` to the next `x`
            "blank_runs": lambda: runs("\n \t", MAX_EDIT_CHARS) + "x",
        },
    ),
    ("grandbo.tiers.edit_rules", r"^[-*•]\s"): Adversarial(
        lambda p, text: edit_rules._shape(text),
        {
            "bullets": lambda: runs("-\n", MAX_EDIT_CHARS),
        },
    ),
    ("grandbo.tiers.edit_rules", r"^\d+[.)]\s"): Adversarial(
        lambda p, text: edit_rules._shape(text),
        {
            "digits": lambda: "1" * MAX_EDIT_CHARS,  # `\d+` to the end, `[.)]` missed
        },
    ),
    ("grandbo.triage.narrate", r"(?<=[.!?])\s+"): Adversarial(
        lambda p, text: narrate._clean_text(text, set(), []),
        {"spaces": lambda: "." + near_miss(" ", BODY, "x"), "stops": lambda: runs(". ", BODY)},
    ),
    ("grandbo.erased", r"[^\x20-\x7e]|[\"\\iksIKS]"): Adversarial(
        lambda p, text: re.split(p, text),
        {
            "letters": lambda: runs("ia", REQUEST),
        },
    ),
}


_KINDS = (re.Pattern, regex.Pattern, type(re2.compile("")), LinearPattern)
_ROOT = pathlib.Path(grandbo.__file__).parent


def _modules() -> list[str]:
    """Every module of the package: by its files, as `pkgutil.walk_packages` would list them if it went into
    folders without an `__init__.py` (`grandbo/eval`); `__main__` runs the CLI when imported."""
    files = sorted(_ROOT.rglob("*.py"))
    parts = [path.relative_to(_ROOT.parent).with_suffix("").parts for path in files if path.name != "__main__.py"]
    return [".".join(part[:-1] if part[-1] == "__init__" else part) for part in parts]


def _found(name: str, value: Any, depth: int = 0) -> Iterator[tuple[str, Any]]:
    if isinstance(value, (*_KINDS, Screen)):
        yield name, value
    elif isinstance(value, MaskPattern):
        yield f"{name}.regex", value.regex
    elif depth < 2 and isinstance(value, list | tuple):
        for n, item in enumerate(value):
            yield from _found(f"{name}[{n}]", item, depth + 1)
    elif depth < 2 and isinstance(value, dict):
        for key, item in value.items():
            yield from _found(f"{name}[{key!r}]", item, depth + 1)


@functools.cache
def _module_patterns() -> dict[str, Any]:
    """Each compiled pattern a module holds at its top level (in a list or tuple too), by its name there; a name it
    imports is its own module's."""
    patterns = {}
    for module_name in _modules():
        module = importlib.import_module(module_name)
        tree = ast.parse(pathlib.Path(module.__file__ or "").read_text())
        imported = {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import | ast.ImportFrom) for alias in node.names}  # fmt: skip
        for name, value in vars(module).items():
            if name not in imported:
                patterns.update((f"{module_name}.{found}", item) for found, item in _found(name, value))
    return patterns


_RE_CALLS = {"compile", "search", "match", "fullmatch", "sub", "subn", "findall", "finditer", "split"}


@functools.cache
def _function_patterns() -> set[tuple[str, str]]:
    """The literal patterns handed to `re` (or `regex`) inside a function, by (module, pattern)."""
    calls = set()
    for module_name in _modules():
        path = _ROOT.parent.joinpath(*module_name.split(".")).with_suffix(".py")
        if not path.exists():
            path = path.with_suffix("") / "__init__.py"
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for call in ast.walk(function):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and isinstance(call.func.value, ast.Name) and call.func.value.id in ("re", "regex", "re2")
                        and call.func.attr in _RE_CALLS and call.args
                        and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str | bytes)):  # fmt: skip
                    calls.add((module_name, call.args[0].value))
    return calls


def test_every_pattern_has_an_entry():
    found = _module_patterns()
    missing = sorted(set(found) - set(PATTERNS))
    assert not missing, (
        f"{len(missing)} module-level pattern(s) without an entry in PATTERNS of {__name__}: "
        + "; ".join(f"{name} = {getattr(found[name], 'pattern', found[name])!r}" for name in missing)
        + ". Add for each `Adversarial(use, {label: text built at its path's limit})`, the text aimed at backtracking "
        "(a run of what it repeats, a near-miss failing at the end) with a comment on why it is the worst case, or "
        "`Fixed(reason)` when no user's text reaches it."
    )
    gone = sorted(set(PATTERNS) - set(found))
    assert not gone, f"PATTERNS lists patterns no module holds any more: {gone}; remove their entries"


def test_every_literal_pattern_a_function_runs_has_an_entry():
    found = _function_patterns()
    missing = sorted(found - set(CALLS))
    assert not missing, (
        f"literal pattern(s) handed to `re` inside a function without an entry in CALLS of {__name__}: {missing}. "
        "Add `(module, pattern): Adversarial(...)` or `Fixed(reason)` as PATTERNS does, or compile it at module "
        "level and list it in PATTERNS."
    )
    gone = sorted(set(CALLS) - found)
    assert not gone, f"CALLS lists patterns no function runs any more: {gone}; remove their entries"


@functools.cache
def _found_patterns() -> dict[str, Any]:
    """Every pattern the package holds or hands `re`, by its name in the tables below."""
    return {**_module_patterns(), **{f"{module}:{pattern!r}": pattern for module, pattern in _function_patterns()}}


def _cases() -> Iterator[Any]:
    """A case for each text built against a pattern, named from the tables alone: the patterns themselves are
    found (every module imported, every source parsed, 4 s of CPU) by the worker that runs the cases, not at
    collection by each."""
    table = {**PATTERNS, **{f"{module}:{pattern!r}": entry for (module, pattern), entry in CALLS.items()}}
    for name, entry in sorted(table.items()):
        if isinstance(entry, Adversarial):
            for label, build in entry.inputs.items():
                yield pytest.param(name, entry.use, build, id=f"{name}-{label}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("name", "use", "build"), list(_cases()))
def test_a_text_built_against_a_pattern_is_read_at_its_limit(name, use, build):
    found = _found_patterns()
    assert name in found, f"no module holds {name} any more: remove its entry (test_every_pattern_has_an_entry)"
    text = build()
    assert len(text) >= NAME
    use(found[name], text)


def test_an_re2_pattern_reads_spaces_groups_and_every_character_as_python_did():
    """The shadow RE2 searches: Python's spaces are spaces, no other character is one of ASCII (`ſ`), a lone
    surrogate is a character; the groups are read from the text (`grandbo.linear`)."""
    link = LinearPattern(r"\[([^\]]*)\]\(([^)\s]+)[^)]*\)|<(https?://[^>]+)>")
    text = "[\ud800 é](x\u3000y) <httpſ://a> [b](c\x0bd) <https://e>"
    python = re.compile(link.pattern)
    assert [(f.span(), f.group(1), f.group(2), f.group(3)) for f in link.finditer(text)] == [
        (m.span(), *m.groups()) for m in python.finditer(text)
    ]
    assert link.sub(lambda f: f.group(1) or f.group(3), text) == python.sub(lambda m: m.group(1) or m.group(3), text)
    heading = LinearPattern(r"(?m)^\s*#\s+(.+?)\s*#*\s*$")
    found = heading.search("\n\u2028\n#\u3000Title ##\x1c\nbody")
    assert found is not None and found.group(1) == "Title" and found[1] == "Title"
