"""Every number a command takes has a range typer enforces (probe 20b B1): `grandbo bench recall --entries -5`
printed numpy's traceback, `--queries 0` statistics'. The walk is over the commands the app has, so an option
added later is held to it too."""

from __future__ import annotations

import pytest
import typer.main
from typer.testing import CliRunner

from grandbo.cli import app
from tests.test_docs import commands

# Options without a range of their own, and why: the domain checks them, with the message REST and MCP give
# for the same field (tests/test_cli.py `test_bad_input_gets_a_clear_message_and_exit_2_never_a_traceback`).
UNBOUNDED = {
    ("incident close", "ttm"): "a time to mitigate: finite and 0 or more, checked by the ledger",
    ("outcome", "ttm"): "a time to mitigate: finite and 0 or more, checked by the ledger",
    ("outcome", "rating"): "+1 or -1, checked by the ledger",
    **{("settings rerank", weight): "a weight from 0 to 1, checked by RerankWeights"
       for weight in ("similarity", "service", "severity", "effectiveness", "age")},
}  # fmt: skip


def _numeric_options():  # type: ignore[no-untyped-def]
    root = typer.main.get_command(app)
    for name in commands(root):
        command = root
        for part in name.split():
            command = command.commands[part]
        for param in command.params:
            if param.type_descriptor.annotation in (int, float):  # `int | None` is described as int too
                yield name, param


def test_every_numeric_option_of_every_command_declares_its_range():
    found = list(_numeric_options())
    assert len(found) >= 20 and ("bench recall", "entries") in {(name, p.name) for name, p in found}
    unbounded = [(name, p.name) for name, p in found if (p.min is None or p.max is None)]
    assert sorted(unbounded) == sorted(UNBOUNDED)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["bench", "recall", "--entries", "-5", "--queries", "5"], "--entries"),
        (["bench", "recall", "--queries", "0"], "--queries"),
        (["bench", "recall", "--queries", "-3"], "--queries"),
        (["bench", "serve", "--entries", "99999999999999999999"], "--entries"),
        (["bench", "tenants", "--orgs", "1000000"], "--orgs"),
        (["recall", "redis", "-k", "0"], "-k"),
        (["examples", "--type", "status-update", "-n", "1000"], "-n"),
        (["worker", "--poll", "inf"], "--poll"),
        (["worker", "--poll", "nan"], "--poll"),
    ],
)
def test_a_count_out_of_its_range_is_a_usage_error_before_anything_runs(args, option):
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and refused.exception is not None and not refused.stdout
    assert f"Invalid value for '{option}'" in refused.stderr and "Traceback" not in refused.stderr


def test_bench_recall_runs_with_no_entries(cli):
    assert '"entries": 0' in cli("bench", "recall", "--entries", "0", "--queries", "3", "--json").stdout
