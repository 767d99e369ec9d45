"""A real hypic-cached for the client's tests, as tests/cached/daemon_fixture.h starts one.

The daemon (the binary $HYPIC_CACHED) runs in a temporary directory with a YAML
configuration written there, on loopback ports it picks (port 0), serving the embedded
trained model `recall` (models/hypic-recall). Its address is read from its
--ready-file. It is always stopped: by the fixture's teardown (SIGKILL, as
test_hypicctl.sh does), also when a test fails, and by the kernel if pytest itself
dies (a parent-death signal), so no run leaves a daemon behind.

Each daemon lives for the test module that asks for it (module scope), so a run holds
only the daemons of one module at a time: `daemon` runs open (plaintext, no tokens:
every call is tenant 'default', an admin), `secure_daemon` with TLS (tests/fixtures/tls)
and two tenants, alice (admin) and bob, `mtls_daemon` asks for client certificates, and
`family_daemon` serves one preset of each hybrid family. Each keeps 6 RPC threads
(limits.workers, 32 by default): four daemons of the default size held 170 threads
together, and a CI machine refused one of them a thread at start (pthread_create EAGAIN).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

import hypic

REPO = Path(__file__).resolve().parents[3]
MODEL_DIR = REPO / "models" / "hypic-recall"
EXAMPLES = MODEL_DIR / "examples"
TLS = REPO / "tests" / "fixtures" / "tls"
ALICE = "alice-secret-token-1"
BOB = "bob-secret-token-22"
READY_S = 60.0  # a model may be generated first (--init-models)


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    dir: Path
    addr: str  # host:port of the gRPC listener

    def log(self) -> str:
        return (self.dir / "daemon.log").read_text(errors="replace")


SETPRIV = shutil.which("setpriv")  # util-linux, Essential in Debian


def spawn(argv: list[str], cwd: Path, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """argv started in cwd, its output into log, killed by the kernel (SIGKILL) when the
    thread that started it ends: setpriv --pdeathsig sets the signal and execs argv.
    Not preexec_fn: subprocess then forks this process and runs the fork handlers, and
    gRPC's (its threads live here) broke its pollers and once hung the suite
    (test_spawn.py); without one it starts the child by exec alone."""
    if SETPRIV is None:
        pytest.fail("setpriv (util-linux) is not on PATH: the tests start no process without a death signal")
    return subprocess.Popen(
        [SETPRIV, "--pdeathsig", "KILL", "--", *argv],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )


def start_daemon(dir: Path, config: str) -> Daemon:
    """Starts $HYPIC_CACHED in dir with config as its hypic-cached.yaml; answers once its
    ready file names the gRPC address. Fails the test (with the daemon's log) when it
    exits or is not ready in READY_S."""
    bin = os.environ.get("HYPIC_CACHED")
    if not bin:
        pytest.fail("set HYPIC_CACHED to the hypic-cached binary")
    (dir / "hypic-cached.yaml").write_text(config)
    with open(dir / "daemon.log", "ab") as log:
        proc = spawn([bin, "--config", "hypic-cached.yaml", "--init-models", "--ready-file", "ready"], dir, log)
    d = Daemon(proc=proc, dir=dir, addr="")
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"hypic-cached exited ({proc.returncode}) during start; its log:\n{d.log()}")
        ready = dir / "ready"
        if ready.exists():
            for line in ready.read_text().splitlines():
                if line.startswith("grpc="):
                    d.addr = line[len("grpc=") :]
            if d.addr:
                return d
        time.sleep(0.05)
    stop_daemon(d)
    pytest.fail(f"hypic-cached did not get ready in {READY_S:.0f} s; its log:\n{d.log()}")


def stop_daemon(d: Daemon) -> None:
    if d.proc.poll() is None:
        d.proc.kill()
    d.proc.wait()


def _serve(tmp_path_factory: pytest.TempPathFactory, name: str, config: str) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp(name), config)
    try:
        yield d
    finally:
        alive = d.proc.poll() is None
        stop_daemon(d)
        if not alive:  # a crash is a failure of whichever test was running, and of this
            pytest.fail(f"hypic-cached died during the tests ({d.proc.returncode}); its log:\n{d.log()}")


# 6 RPC threads a daemon (limits.workers, 32 by default), and Watch below them
LIMITS = "limits: {workers: 6, watchers: 2}"
COMMON = f"""\
listen: 127.0.0.1:0
http_listen: ""
models: [{{name: recall, path: {MODEL_DIR}}}]
tiers: {{host: {{bytes: 64M, admit: always}}}}
executor: {{threads: 2}}
{LIMITS}
log: {{requests: false}}
"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """hypic-cached, plaintext, no tokens."""
    yield from _serve(tmp_path_factory, "open", COMMON)


# one generated preset per hybrid family (--init-models)
FAMILIES = ("tiny", "tiny-olmo", "tiny-minimax", "tiny-kimi", "tiny-nemotron", "tiny-ling")


@pytest.fixture(scope="module")
def family_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """hypic-cached serving one generated preset of each hybrid family."""
    models = ", ".join(f"{{name: {m}, path: var/models/{m}}}" for m in FAMILIES)
    config = COMMON.replace(f"models: [{{name: recall, path: {MODEL_DIR}}}]", f"models: [{models}]")
    assert config != COMMON
    yield from _serve(tmp_path_factory, "families", config)


@pytest.fixture(scope="module")
def secure_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """hypic-cached with TLS and tenants alice (admin) and bob."""
    config = (
        COMMON
        + f"""\
tls: {{cert: {TLS / "server.pem"}, key: {TLS / "server.key"}}}
tenants:
  list:
    - {{name: alice, token: {ALICE}, admin: true}}
    - {{name: bob, token: {BOB}}}
"""
    )
    yield from _serve(tmp_path_factory, "secure", config)


@pytest.fixture(scope="module")
def mtls_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """hypic-cached asking every connection for a client certificate of members-ca.pem."""
    config = (
        COMMON
        + f"""\
tls: {{cert: {TLS / "member.pem"}, key: {TLS / "member.key"}, client_ca: {TLS / "members-ca.pem"},
      require_client_cert: true}}
tenants:
  list:
    - {{name: alice, token: {ALICE}, admin: true}}
"""
    )
    yield from _serve(tmp_path_factory, "mtls", config)


@pytest.fixture
def client(daemon: Daemon) -> Iterator[hypic.Client]:
    """A client of the open daemon, whose store starts each test empty."""
    with hypic.Client(daemon.addr, timeout=60) as c:
        c.invalidate(all_of_tenant=True)
        yield c


def tls_client(d: Daemon, token: str | None, ca: str = "ca.pem") -> hypic.Client:
    return hypic.Client(d.addr, token=token, tls_root_pem=(TLS / ca).read_bytes(), timeout=30)
