"""What every command group of the CLI shares: the app, the options, opening the store, printing errors."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from pydantic import BaseModel, ValidationError

from grandbo.cli.terminal import say
from grandbo.config import PYTHON_YOUNG_OBJECTS, Settings
from grandbo.config_serving import MIN_RATE
from grandbo.errors import GrandboError, InvalidInputError
from grandbo.logs import configure as configure_logs
from grandbo.values import strict_json

if TYPE_CHECKING:
    from grandbo.service import Grandbo

app = typer.Typer(
    name="grandbo",
    help="Institutional memory for AI agents and on-call teams: has this happened before, and what worked?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

OrgOption = Annotated[
    str | None,
    typer.Option("--org", help="Organization to act on (it must exist: `grandbo orgs create`). Default: GRANDBO_ORG."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


class _State:
    settings: Settings
    verbose: bool = False


state = _State()


def _print_version(asked: bool) -> None:
    if asked:
        from grandbo import __version__

        say(f"grandbo {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO level on stderr.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    try:
        state.settings = Settings()
    except ValidationError as error:  # one line per setting, never pydantic's report (nor a value: it may be a secret)
        for problem in error.errors():
            field = "_".join(str(part) for part in problem["loc"])
            said = problem["msg"].removeprefix("Value error, ")
            bounds = accepted_range(field) if problem["type"] != "value_error" else None  # our validators say it
            say(f"error: GRANDBO_{field.upper()}: {said}{f' (accepted: {bounds})' if bounds else ''}", err=True)
        raise typer.Exit(2) from error
    except ValueError as error:
        say(f"error: invalid GRANDBO_ configuration: {error}", err=True)
        raise typer.Exit(2) from error
    state.verbose = verbose
    # Log lines stay off the console: what a command has to say, it prints. --verbose (or an explicit
    # GRANDBO_LOG_LEVEL) shows them on stderr.
    if verbose:
        level = "INFO"
    elif "log_level" in state.settings.model_fields_set:
        level = state.settings.log_level
    else:
        level = "CRITICAL"
    configure_logs(level, state.settings.log_json)


def accepted_range(field: str) -> str | None:
    """What a numeric setting accepts, in words ("1 to 1000"), from the bounds its field declares, as a refusal
    and the README's settings table say it; None for a setting that declares none."""
    info = Settings.model_fields.get(field)
    bounds = {kind: getattr(m, kind) for m in (info.metadata if info else ()) for kind in ("ge", "gt", "le")
              if hasattr(m, kind)}  # fmt: skip
    if "le" not in bounds:
        return None
    high = _number(bounds["le"])
    if field in _ZERO_OR_AT_LEAST:
        return f"0, or {_number(_ZERO_OR_AT_LEAST[field])} to {high}"
    if "gt" in bounds:
        return f"more than {_number(bounds['gt'])}, up to {high}"
    return f"{_number(bounds['ge'])} to {high}"


# Settings where 0 turns something off and any other value has a floor of its own (their validators say why).
_ZERO_OR_AT_LEAST = {"alert_retention_days": 30, "gc_young_objects": PYTHON_YOUNG_OBJECTS,
                     "rate_limit_per_key": MIN_RATE, "rate_limit_per_org": MIN_RATE}  # fmt: skip


def _number(value: float) -> str:
    return f"{value:g}" if value != int(value) else str(int(value))  # 86400, not 86400.0 or 8.64e+04


@contextmanager
def _errors() -> Iterator[None]:
    """Print a GrandboError as one clear line (its remedy included) and exit 2."""
    try:
        yield
    except GrandboError as error:
        say(f"error: {error.message}", err=True)
        raise typer.Exit(2) from error
    except OSError as error:  # a file or folder the command was given
        where = f" ({error.filename})" if error.filename else ""
        say(f"error: {error.strerror or error}{where}. Check the path and its permissions.", err=True)
        raise typer.Exit(2) from error


MAX_FILE_BYTES = 64 << 20  # a catalog, an alert, a draft or a list of people: far less; /dev/zero has no end


def read_bytes(path: Path) -> bytes:
    """The bytes of a file the command was given, read up to MAX_FILE_BYTES, or an InvalidInputError. A file was
    read whole: `grandbo catalog import /dev/zero` took 7.6 GB in 30 s and went on."""
    with path.open("rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise InvalidInputError(
            f"{path} holds more than {MAX_FILE_BYTES >> 20} MiB, far more than this command reads: is it the file you "
            "meant? Give that file.",
            detail={"path": str(path), "limit_bytes": MAX_FILE_BYTES},
        )
    return data


def _read_text(path: Path) -> str:
    """The text of a file the command was given, or an InvalidInputError saying why it cannot be read as text."""
    try:
        return read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as error:
        raise _not_utf8(path, error) from error


def _read_json(path: Path, shape: str) -> Any:
    """The JSON a file the command was given holds (UTF-8, UTF-16 or UTF-32, with or without a byte order mark:
    what `json.loads` reads), or an InvalidInputError naming the file and `shape`."""
    try:
        return strict_json(read_bytes(path))  # NaN, Infinity and 1e400 too: JSON has no such number
    except UnicodeDecodeError as error:
        raise _not_utf8(path, error) from error
    except ValueError as error:
        raise InvalidInputError(
            f"{path} is not JSON ({error}); it should hold {shape}.", detail={"path": str(path)}
        ) from error


def _not_utf8(path: Path, error: UnicodeDecodeError) -> InvalidInputError:
    return InvalidInputError(
        f"{path} is not UTF-8 text (byte {error.start + 1} cannot be read); save it as UTF-8.",
        detail={"path": str(path)},
    )


def _open(*, catch_up: bool = True) -> Grandbo:
    """Open the configured store; on the embedded one, first run what write-behinds a process that died left
    (`catch_up`: not for `grandbo worker`, whose rounds re-drive them in turn with the embedding)."""
    from grandbo.service import Grandbo  # the engine: imported by the commands that open it, not by `--help`

    grandbo = Grandbo.open(state.settings)
    if catch_up and state.settings.store_url.startswith("sqlite:"):  # embedded: what a process that died left first
        grandbo.redriver.catch_up()
    return grandbo


def counted(n: int, one: str, many: str) -> str:
    """ "1 hit", "3 hits": a count with its noun."""
    return f"{n} {one if n == 1 else many}"


_Listed = TypeVar("_Listed", bound=BaseModel)


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=None, default=str))


def _print_list(items: Sequence[_Listed], as_json: bool, empty: str, line: Callable[[_Listed], str]) -> None:
    """A list command's answer: every item as JSON with --json; else one `line` an item, or `empty` (what to do
    to have some) when there are none."""
    if as_json:
        _print_json([item.model_dump(mode="json") for item in items])
        return
    if not items:
        say(empty)
    for item in items:
        say(line(item))
