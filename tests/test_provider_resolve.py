"""A provider's name is looked up within the call's time (`grandbo.deadlines._addresses`). The standard library's
look-up takes no timeout: with a resolver that did not answer, a provider call waited for the resolver's own retries
(resolv.conf's timeout times its attempts, for each nameserver: 10 s and more by default), past any deadline of
ours, and ended in a look-up failure rather than a timeout.

The stall is real: a process of its own, in namespaces of its own (`unshare -rmn`: a mount namespace whose
/etc/resolv.conf names a nameserver on loopback, and a network namespace with loopback alone, so that no query
leaves it), asks a provider's name of a nameserver that reads every query and answers none."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grandbo import deadlines

pytestmark = pytest.mark.timeout(120)

NAMESERVER = "127.0.0.77"
# A resolver that waits 30 s for an answer, once: the call's 1 s ends long before.
RESOLV_CONF = f"nameserver {NAMESERVER}\noptions timeout:30 attempts:1\n"
CALL = f"""
import socket
import httpx
from grandbo.http import client, send_bounded

silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
silent.bind(("{NAMESERVER}", 53))  # reads every query, answers none
try:
    send_bounded(client(1.0), "POST", "http://embeddings.provider.test/v1/embeddings", timeout=1.0, limit=1000,
                 json={{"input": ["disk full"]}})
    print("answered")
except httpx.HTTPError as error:
    print(type(error).__name__)
silent.settimeout(5)
print("asked" if silent.recv(512) else "not asked")
"""
MANY_CALLS = f"""
import socket
import threading
import httpx
from grandbo.http import client, send_bounded

silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
silent.bind(("{NAMESERVER}", 53))
http, errors = client(1.0), set()

def call(name):
    try:
        send_bounded(http, "POST", f"http://{{name}}/v1/embeddings", timeout=1.0, limit=1000, json={{"input": ["x"]}})
    except httpx.HTTPError as error:
        errors.add(type(error).__name__)

names = ["embeddings.provider.test"] * 24 + [f"embeddings-{{n}}.provider.test" for n in range(24)]
calls = [threading.Thread(target=call, args=(name,)) for name in names]
for each in calls:
    each.start()
for each in calls:
    each.join()
print(sum(thread.name.startswith("grandbo-resolve-") for thread in threading.enumerate()), *sorted(errors))
"""


def _namespaces_available(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    (target := tmp_path / "probe").touch()
    probe = subprocess.run(["unshare", "-rmn", "sh", "-c", f"ip link set lo up && mount --bind /dev/null {target}"],
                           capture_output=True, check=False)  # fmt: skip
    return probe.returncode == 0


def _in_namespaces(tmp_path: Path, call: str) -> list[str]:
    """What `call` prints, run by a process of its own with the silent nameserver's resolv.conf."""
    if not _namespaces_available(tmp_path):
        pytest.skip("this machine lets no user make a mount and network namespace (unshare -rmn)")
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(RESOLV_CONF)
    script = f'ip link set lo up && mount --bind "{resolv}" /etc/resolv.conf && exec "{sys.executable}" -c "$CALL"'
    run = subprocess.run(["unshare", "-rmn", "sh", "-c", script], capture_output=True, text=True, timeout=100,
                         env={"CALL": call, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                              "PYTHONPATH": str(Path(__file__).parent.parent / "src")})  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.split()


def test_a_provider_whose_name_the_resolver_never_answers_times_out_at_the_calls_deadline(tmp_path):
    # Before: "ConnectError", the look-up's own failure once the resolver gave up (30 s on).
    assert _in_namespaces(tmp_path, CALL) == ["ConnectTimeout", "asked"]


def test_calls_the_resolver_never_answers_leave_a_few_look_ups_waiting_not_one_per_call(tmp_path):
    """Review 26 L1: each call that timed out left its look-up's thread waiting on the resolver (30 s here), so a
    silent resolver piled up a thread per call. 24 calls to one name, and one call to each of 24 names, leave one
    look-up for the one name and a few at most for the others; every call still ends in a timeout."""
    printed = _in_namespaces(tmp_path, MANY_CALLS)
    waiting, errors = int(printed[0]), set(printed[1:])
    assert errors == {"ConnectTimeout"}
    assert 1 <= waiting <= deadlines._LookUps.MOST  # before: 48, a thread per call
