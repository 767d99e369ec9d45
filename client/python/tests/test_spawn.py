"""How the suite starts its processes (conftest.spawn): never by a fork of this process.

gRPC keeps threads here (channels, pollers) and registers fork handlers. A fork that runs
them, as subprocess's does whenever it is given preexec_fn, broke gRPC's pollers in this
process (epoll_wait: Bad file descriptor) and once hung the suite for good while an etcd
started. The children are started by exec alone (vfork), with their parent-death signal
set by setpriv instead of preexec_fn.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import hypic
from conftest import COMMON, spawn, start_daemon, stop_daemon

_forks = [0]  # forks of this process that ran the fork handlers
os.register_at_fork(before=lambda: _forks.__setitem__(0, _forks[0] + 1))


def test_a_daemon_starts_without_a_fork_while_grpc_is_busy(client: hypic.Client, tmp_path: Path) -> None:
    stop, calls = threading.Event(), [0]

    def busy() -> None:  # gRPC in use on another thread meanwhile
        while not stop.is_set():
            client.health()
            calls[0] += 1

    t = threading.Thread(target=busy)
    t.start()
    try:
        before = _forks[0]
        d = start_daemon(tmp_path, COMMON)
        try:
            with hypic.Client(d.addr, timeout=30) as c:
                assert c.health().status == hypic.HealthStatus.SERVING
        finally:
            stop_daemon(d)
        assert _forks[0] == before, "starting hypic-cached forked this process"
    finally:
        stop.set()
        t.join(60)
    assert calls[0] > 0


def test_spawn_runs_the_program_itself_with_a_death_signal(tmp_path: Path) -> None:
    # a Python that spawns `sleep 60` as the suite does, prints its pid and exits: the
    # kernel must kill the sleep with it, and the sleep must be the program itself
    # (setpriv exec'd it), not a wrapper beside it
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from pathlib import Path\nfrom conftest import spawn\n"
        f"p = spawn(['sleep', '60'], Path({str(tmp_path)!r}), open({str(tmp_path / 'log')!r}, 'wb'))\n"
        "comm = Path(f'/proc/{p.pid}/comm')\n"
        "import time\n"
        "for _ in range(250):\n"
        "    if comm.read_text().strip() == 'sleep': break\n"
        "    time.sleep(0.02)\n"
        "print(p.pid, comm.read_text().strip())\n"
    )
    before = _forks[0]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert _forks[0] == before
    pid, comm = r.stdout.split()
    assert comm == "sleep"
    status = Path(f"/proc/{pid}/status")
    for _ in range(250):  # killed, then reaped by init
        if not status.exists() or "State:\tZ" in status.read_text():
            break
        time.sleep(0.02)
    assert not status.exists() or "State:\tZ" in status.read_text(), f"sleep {pid} outlived its parent"
