"""hypic.vllm end to end: vLLM's CPU build (the venv of tools/vllm/venv.sh) with
HypicConnector, and hypic-cached serving the same checkpoints.

The checkpoints are made here by tools/vllm/make_checkpoints.py (tiny random Qwen3.5 and
Qwen3-Next, bf16, linear head dim 128: what vLLM's CPU kernels take). The daemon listens
on a loopback port picked once, so that it can be stopped and started again under
another configuration (no tenant of the connector's token, the model under another name)
while vLLM keeps the connector it was started with. vLLM runs in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0), so that a test can reach the connector's worker side;
one vLLM engine a process (vLLM keeps its connector in a global), so each model's tests
run in a pytest of their own: HYPIC_VLLM_MODEL names it (tests/client/test_vllm.sh runs
qwen35, qwen3next, then test_prefix_caching.py). HYPIC_VLLM_CHECKPOINTS: a folder the
checkpoints were made in already. Every daemon is stopped at the end, also when a test
fails.
"""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import importlib.util
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


fixture = _load("hypic_daemon_fixture", HERE.parent / "tests" / "conftest.py")
REPO: Path = fixture.REPO
TOKEN = "hypic-e2e-vllm-token-0001"  # the connector's
OTHER_TOKEN = "hypic-e2e-vllm-token-0002"
# After a Lookup that found no daemon the connector leaves requests to vLLM for this long:
# long enough that a loaded machine's next request still falls inside it (test_fail_closed)
RETRY_AFTER_S = 8
MODELS = ("qwen35", "qwen3next")  # the daemon's names; folders <name>-tiny


MODEL = os.environ.get("HYPIC_VLLM_MODEL", MODELS[0])


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("HYPIC_VLLM_CHECKPOINTS")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("checkpoints")
    subprocess.run(
        [sys.executable, str(REPO / "tools" / "vllm" / "make_checkpoints.py"), str(out), "--seed", "1"],
        check=True,
    )
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """hypic-cached on a fixed loopback port; restart() swaps its configuration."""

    def __init__(self, root: Path, checkpoints: Path) -> None:
        self.root = root
        self.checkpoints = checkpoints
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.d: object | None = None
        self.runs = 0

    def config(self, token: str = TOKEN, names: tuple[str, ...] = MODELS) -> str:
        """Both models under names; one admin tenant of token (none: no tokens)."""
        models = ", ".join(
            f"{{name: {n}, path: {self.checkpoints / (m + '-tiny')}}}" for n, m in zip(names, MODELS)
        )
        return (
            f"listen: {self.addr}\nhttp_listen: \"\"\nmodels: [{models}]\n"
            "tiers: {host: {bytes: 512M, admit: always}}\nexecutor: {threads: 2}\n"
            "transport: {max_buffer: 256M}\nlimits: {workers: 8, watchers: 2}\nlog: {requests: false}\n"
            # hits fetched, never recomputed when that looks cheaper (auto): the state a
            # test asks for is then the one the connector loaded, bit for bit
            "pic: {reuse: fetch}\n"
        ) + (f"tenants:\n  list:\n    - {{name: e2e, token: {token}, admin: true}}\n" if token else "")

    def start(self, **kw: object) -> None:
        self.stop()
        self.runs += 1
        d = self.root / f"run{self.runs}"
        d.mkdir()
        self.d = fixture.start_daemon(d, self.config(**kw))  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.d is not None:
            fixture.stop_daemon(self.d)
            self.d = None
            # the port is free again once the listener is gone
            for _ in range(100):
                with socket.socket() as s:
                    try:
                        s.bind(("127.0.0.1", self.port))
                        break
                    except OSError:
                        time.sleep(0.05)


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory, checkpoints: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("daemon"), checkpoints)
    d.start()
    try:
        yield d
    finally:
        d.stop()


def make_llm(model_dir: Path, daemon: Daemon, name: str, dump_dir: Path, prefix_caching: bool) -> object:
    from vllm import LLM
    from vllm.config import KVTransferConfig

    return LLM(
        model=str(model_dir),
        dtype="bfloat16",
        max_model_len=8192,
        enforce_eager=True,
        enable_prefix_caching=prefix_caching,
        kv_cache_memory_bytes=1 << 30,
        seed=0,
        kv_transfer_config=KVTransferConfig(
            kv_connector="HypicConnector",
            kv_connector_module_path="hypic.vllm",
            kv_role="kv_both",
            kv_connector_extra_config={
                "address": daemon.addr,
                "token": TOKEN,
                "model": name,
                "dump_dir": str(dump_dir),
                "timeout_s": 10,
                "retry_after_s": RETRY_AFTER_S,
            },
        ),
    )
