"""bench/vllm_bench.py at its smallest: it runs, and its last line is its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO, TOKEN, Daemon


def test_the_benchmark_runs(daemon: Daemon, checkpoints: Path) -> None:
    daemon.start()
    p = subprocess.run(
        [sys.executable, str(REPO / "client" / "python" / "bench" / "vllm_bench.py"), "--addr", daemon.addr,
         "--token", TOKEN, "--model", "qwen35", "--model-dir", str(checkpoints / "qwen35-tiny"),
         "--docs", "3", "--doc-tokens", "128", "--requests", "2"],
        capture_output=True, text=True, timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    last = json.loads(p.stdout.strip().splitlines()[-1])
    print("\n" + p.stdout)
    assert last["bench"] == "vllm_connector" and last["requests"] == 2
    assert all(v > 0 for v in last["ttft_p50_ms"].values())
    # the connector claimed all but the query's last tokens: vLLM computed under 5 %
    assert 0 < last["fraction_computed_by_vllm"]["connector"] < 0.05
