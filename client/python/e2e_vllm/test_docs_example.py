"""docs/frontends.md's vLLM example, its two sh blocks as written: vLLM's OpenAI server
with the connector (started, waited for, always stopped), then the two requests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from conftest import REPO, Daemon, free_port


def blocks() -> list[str]:
    text = (REPO / "docs" / "frontends.md").read_text()
    section = text[text.index("### Example: vLLM's OpenAI server") :]
    section = section[: section.index("\n## ")]
    found = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert len(found) == 2, "docs/frontends.md: the vLLM example has two sh blocks"
    return found


def test_the_docs_example_runs_as_written(daemon: Daemon, checkpoints: Path, tmp_path: Path) -> None:
    serve, ask = blocks()
    port = free_port()
    env = {
        **os.environ,
        "MODEL_DIR": str(checkpoints / "qwen35-tiny"),
        "HYPIC_ADDR": daemon.addr,
        "VLLM_PORT": str(port),
        # `python` in the blocks is vLLM's
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    # the example's daemon has no tokens
    daemon.start(token="")
    with open(tmp_path / "vllm.log", "wb") as log:
        server = subprocess.Popen(["sh", "-c", serve], env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, (tmp_path / "vllm.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "vLLM's server was not up in 300 s"
                time.sleep(1)
        p = subprocess.run(["sh", "-c", ask], env=env, capture_output=True, text=True, timeout=300)
        print("\n" + p.stdout)
        assert p.returncode == 0, p.stderr[-2000:]
        lines = p.stdout.strip().splitlines()
        assert len(lines) == 2
        assert "'claimed_tokens': 0, 'declined': 'no segment is cached (warmed after the request)'" in lines[0]
        assert "{'hypic': {'claimed_tokens': 201, 'segments_used': 2, 'hits': 2}}" in lines[1]
        # the same words both times
        assert lines[0].split("{")[0].strip() == lines[1].split("{")[0].strip()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
