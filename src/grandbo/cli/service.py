"""`grandbo serve|mcp|tools|keys|webhooks`: how agents and paging tools reach Grandbo."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import structlog
import typer

from grandbo.api.waiting import Waiting
from grandbo.cli.app import JsonOption, OrgOption, _errors, _open, _print_json, _print_list, app, state
from grandbo.cli.options import command_group
from grandbo.cli.terminal import say
from grandbo.cli.waiting import wait_for_store
from grandbo.errors import ConfigError, InvalidInputError, NotAuthorizedError, NotFoundError
from grandbo.tiers.webhook_secrets import SIGNED

if TYPE_CHECKING:
    import uvicorn

    from grandbo.memory import OrgMemory
    from grandbo.service import Grandbo
    from grandbo.tiers.keys import ApiKey

log = structlog.get_logger(__name__)
BACKLOG = 2048  # connections the kernel queues before `accept` (uvicorn's own default; Python's is 128)

keys_app = command_group("keys", "Organization API keys (stored as hashes; shown once).")
webhooks_app = command_group("webhooks", "Signing secrets of alert webhooks, per organization and source.")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.", min=1, max=65535)] = 8080,
    workers: Annotated[
        bool, typer.Option("--worker/--no-worker", help="Run the embed worker in this process (embedded default).")
    ] = True,
) -> None:
    """Serve the REST API, the MCP endpoint (/mcp) and the alert webhooks; loads the model once."""
    import uvicorn

    from grandbo.api.app import create_app
    from grandbo.api.connections import connections_cap, open_files, server_config
    from grandbo.heap import settle
    from grandbo.logs import configure as configure_logs
    from grandbo.service import Grandbo

    settings = state.settings
    if not state.verbose:
        # One JSON line per request on stderr, unless GRANDBO_LOG_LEVEL or GRANDBO_LOG_JSON says otherwise.
        named = settings.model_fields_set
        configure_logs(settings.log_level if "log_level" in named else "INFO",
                       json=settings.log_json if "log_json" in named else True)  # fmt: skip
        logging.getLogger("mcp").setLevel(logging.WARNING)  # the SDK's session manager speaks up at INFO
    if settings.local_threads is None:  # one model thread per call; the query batcher runs one call per core
        settings = settings.model_copy(update={"local_threads": 1})
    with _errors():
        settings.session_secret()  # the console's, checked here (no other command needs it), before port and model
    listening = _listen(host, port)  # before the model loads: a port in use is said at once
    # A connection takes a file: the soft limit (often 1,024) is raised to the hard one, and the connections kept
    # stay below it (`api.connections`).
    soft_before, soft, hard = open_files()  # said once the store opened: a refusal to start stays one line
    stop = _Stop()  # a SIGTERM from here on stops the server once it runs, and the store closes on the way out
    signal.signal(signal.SIGTERM, stop)
    # Write-behinds run on threads either way; --no-worker leaves embedding to `grandbo worker` processes.
    opener = partial(Grandbo.open, settings, background=True, batch_queries=True, embed_here=workers)
    waiting = Waiting(listening)  # while the store does not answer: /healthz 200, /readyz and the rest 503
    try:
        with _errors():
            opened = wait_for_store(opener, settings, stop.waited, "serve", waiting=waiting.tell)
    except KeyboardInterrupt:  # Ctrl-C while it waited
        raise typer.Exit(130) from None
    finally:
        waiting.stop()
    if opened is None:  # SIGTERM while it waited
        _exit_as_signalled()
        return
    grandbo = opened
    with _errors():
        # The kept indexes' bound, said once: unset, it follows the machine or container the process finds itself in.
        log.info("index.memory_bound", mb=settings.index_memory_mb, source=settings.index_memory_source())
        log.info("http.open_files", soft_before=soft_before, soft=soft, hard=hard,
                 max_connections=connections_cap(settings))  # fmt: skip
        # The model loads now, not at the first request. A hosted provider that does not answer does not stop
        # the start: the process serves degraded (lexical recall, embeddings queued) and says so in /readyz.
        answered = grandbo.health.warm_up()
        if workers:
            grandbo.worker()  # and the embed worker starts
    app = create_app(grandbo)
    # The app and the model built: out of the cycle collector's way for good (each full collection stopped every
    # request for a quarter of a second).
    log.info("heap.settled", frozen=settle(settings.gc_young_objects), young_objects=settings.gc_young_objects)
    say(f"grandbo serving {grandbo.url} on http://{host}:{port} (REST /v1, MCP /mcp)", err=True)
    if not answered:
        error = grandbo.health.error()
        why = error.message if error else ""
        say(f"degraded: the embedding provider did not answer ({why}); recall is lexical only and writes are "
            "queued for embedding until it does (GET /readyz)", err=True)  # fmt: skip
    if not workers:
        say(
            "--no-worker: this process embeds no memory; run `grandbo worker` against the same store, or new "
            "memories stay pending (lexical only; GET /readyz shows the outbox)",
            err=True,
        )
    server = uvicorn.Server(server_config(app, settings, host, port))
    stop.serving(server)
    try:
        server.run(sockets=[listening])
    finally:
        grandbo.close()
    if stop.signals:
        _exit_as_signalled()


def _exit_as_signalled() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.raise_signal(signal.SIGTERM)


class _Stop:
    """`grandbo serve`'s SIGTERM handler until uvicorn installs its own, and again once uvicorn restores it.

    uvicorn stops on SIGTERM, then raises it again on its way out; under the default action that ended the
    process before the store closed (acknowledged write-behinds unfinished). It is noted here instead, and raised
    once the store is closed, so the exit status still says SIGTERM. One that comes while the model loads, or
    between here and uvicorn's own handler, tells the server to stop as soon as it has started: noting it alone
    left a server that had been told to stop serving on."""

    def __init__(self) -> None:
        self.signals: list[int] = []
        self.waited = threading.Event()  # ends a wait for the store at start (`cli.waiting`)
        self._server: uvicorn.Server | None = None

    def __call__(self, number: int, _frame: object) -> None:
        self.signals.append(number)
        self.waited.set()
        if self._server is not None:
            self._server.should_exit = True

    def serving(self, server: uvicorn.Server) -> None:
        """The uvicorn server about to run: told at once if a SIGTERM came before it."""
        self._server = server
        if self.signals:
            server.should_exit = True


def _listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound and listening, or one error line saying why it cannot be (exit 2)."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.create_server((host, port), family=family, backlog=BACKLOG)
    except OSError as error:
        say(f"error: cannot listen on {host}:{port}: {error.strerror or error}. Stop the process that "
            "holds it, or pass another --port (or --host).", err=True)  # fmt: skip
        raise typer.Exit(2) from error


@app.command("mcp")
def mcp_stdio(
    org: Annotated[
        str | None,
        typer.Option(
            "--org",
            help="Organization to serve without a key (embedded store only; GRANDBO_ORG is not used here). With "
            "GRANDBO_API_KEY, the key's organization, which --org may only repeat.",
        ),
    ] = None,
) -> None:
    """Serve the MCP tools over stdio for one organization (GRANDBO_API_KEY, or --org on an embedded store)."""
    import anyio

    from grandbo.mcp.server import stdio_server
    from grandbo.mcp.stdio import serve
    from grandbo.service import Grandbo
    from grandbo.tiers.keys import Scope

    key = os.environ.get("GRANDBO_API_KEY", "").strip()
    with _errors():
        # A session's process: an edit's LLM classification must not hold up the agent's tool call.
        grandbo = Grandbo.open(state.settings, batch_queries=False, write_behind=True)
        try:
            if key:
                memory, record = _authenticated(grandbo, key)
                scope = record.scope
                if org and org != memory.org:  # the key names the organization: never serve another one quietly
                    raise ConfigError(
                        f"GRANDBO_API_KEY is a key of organization {memory.org!r}, but --org names {org!r}. Set "
                        f"GRANDBO_API_KEY to a key of {org!r} (`grandbo keys create --org {org}`), or drop --org.",
                        detail={"key_org": memory.org, "org": org},
                    )
            elif org and not state.settings.database_url:
                memory, scope = grandbo.org(org), Scope.WRITE
            else:
                raise ConfigError(
                    "Name the organization: set GRANDBO_API_KEY to one of its keys (`grandbo keys create`), or "
                    "pass --org on the embedded store.",
                    detail={},
                )
            memory.pin()  # the session acts for this org, never for one created again under its name
        except (NotAuthorizedError, ConfigError, NotFoundError):
            grandbo.close()
            raise
    try:
        recheck = (lambda: _authenticated(grandbo, key)) if key else None
        anyio.run(serve, stdio_server(memory, scope, verbose=state.verbose, recheck=recheck))
    finally:
        grandbo.close()


def _authenticated(grandbo: Grandbo, key: str) -> tuple[OrgMemory, ApiKey]:
    """The org and record of GRANDBO_API_KEY, or a ConfigError that names the variable (not a request header)."""
    try:
        return grandbo.authenticate(key)
    except NotAuthorizedError as error:
        raise ConfigError(
            f"GRANDBO_API_KEY is not an active key of the store at {grandbo.url}: it is unknown, revoked, or a "
            "key of another store (check GRANDBO_HOME or GRANDBO_DATABASE_URL). Make one with `grandbo keys "
            "create --org ORG --scope read|write`.",
            detail={},
        ) from error


@app.command()
def tools(
    format: Annotated[str, typer.Option("--format", help="openai or anthropic function schemas.")] = "openai",
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="Schemas strict mode accepts (OpenAI's, Anthropic's): closed, all required, nullable."
        ),
    ] = False,
) -> None:
    """Print the agent tools as JSON function schemas (for LLM function calling without MCP; run a call with
    POST /v1/tools/{name})."""
    from grandbo.mcp.schemas import function_schemas

    with _errors():
        typer.echo(json.dumps(function_schemas(format, strict=strict), indent=2))


@keys_app.command("create")
def keys_create(
    scope: Annotated[str, typer.Option(help="read, write or admin.")],
    name: Annotated[str | None, typer.Option(help="What the key is for (shown by `keys list`).")] = None,
    org: OrgOption = None,
    as_json: JsonOption = False,
) -> None:
    """Make an API key for an organization; the key is printed once (last line) and stored as a hash."""
    with _errors(), _open() as grandbo:
        record, key = grandbo.org(org).keys.create(scope, name=name, actor="cli")
    if as_json:
        _print_json({**record.model_dump(mode="json"), "key": key})
        return
    say(f"created {record.scope.value} key {record.id} for {grandbo.org(org).org!r}; it is shown only now:")
    say(key)


@keys_app.command("list")
def keys_list(org: OrgOption = None, as_json: JsonOption = False) -> None:
    """List an organization's keys (never the keys themselves)."""
    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        records = memory.keys.all()
    create = f"grandbo keys create --scope read|write|admin --org {memory.org}"
    _print_list(records, as_json, f"no API keys in org {memory.org!r} yet; make one with `{create}`", _key_line)


def _key_line(record: ApiKey) -> str:
    status = f"revoked {record.revoked_at:%Y-%m-%d}" if record.revoked_at else "active"
    return f"{record.id}  {record.scope.value:<5}  {status:<18}  {record.name}"


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key id (from `keys list`).")], org: OrgOption = None
) -> None:
    """Revoke a key: refused from now on (by a running server within GRANDBO_KEY_CACHE_SECONDS)."""
    with _errors(), _open() as grandbo:
        grandbo.org(org).keys.revoke(key_id, actor="cli")
        window = grandbo.settings.key_cache_seconds
    say(f"revoked {key_id}" + (f"; a running server refuses it within {window:g} s" if window else ""))


@webhooks_app.command("add")
def webhooks_add(
    source: Annotated[
        str,
        typer.Argument(help=f"{', '.join(SIGNED)}: the source that signs its deliveries (the others carry the key)."),
    ],
    secret_file: Annotated[
        str | None,
        typer.Option(help="A file holding the signing secret the sender was given, or - to read it from stdin."),
    ] = None,
    secret: Annotated[
        str | None,
        typer.Option(hidden=True, help="Refused: a secret on the command line shows in shell history and `ps`."),
    ] = None,
    org: OrgOption = None,
) -> None:
    """Accept deliveries signed with this secret (older ones stay valid while a secret rotates)."""
    with _errors():
        given = _secret(secret_file, secret)
        with _open() as grandbo:
            count = grandbo.org(org).webhook_secrets.add(source, given, actor="cli")
    say(f"{source}: {count} secret(s) accepted")


def _secret(path: str | None, secret: str | None) -> str:
    """The secret from its file (`-`: stdin, the first line); never from the command line."""
    if secret is not None or path is None:
        raise InvalidInputError(
            ("--secret is not taken: a secret on the command line stays in the shell's history and shows in the "
             "process list. " if secret is not None else "")
            + "Give the signing secret in a file, --secret-file FILE, or on stdin, --secret-file - (e.g. "
            "`printenv PD_SECRET | grandbo webhooks add pagerduty --secret-file -`).",
            detail={},
        )  # fmt: skip
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInputError(
            f"Cannot read the secret from {path}: {type(error).__name__}. Name a readable UTF-8 file, or - for stdin.",
            detail={"path": path},
        ) from None
    lines = text.splitlines()
    return lines[0].strip() if lines else ""


@webhooks_app.command("rotate-done")
def webhooks_rotate_done(
    source: Annotated[str, typer.Argument(help=f"{', '.join(SIGNED)}.")], org: OrgOption = None
) -> None:
    """End a secret rotation: keep only the newest secret of the source."""
    with _errors(), _open() as grandbo:
        dropped = grandbo.org(org).webhook_secrets.remove_all_but_newest(source, actor="cli")
    if dropped:
        say(f"{source}: {dropped} older secret(s) dropped; only the newest is accepted now")
    else:
        say(f"{source}: one secret held, nothing to drop (no rotation was under way)")
