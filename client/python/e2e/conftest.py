"""The frontend's end-to-end test: a real hypic-cached serving the checkpoints it decodes
from: one generated preset per hybrid family (--init-models writes each into the daemon's
var/models/<name>: `tiny`, Qwen3NextForCausalLM, `tiny-moe`, the same with MoE blocks, `tiny-olmo`, OlmoHybridForCausalLM,
`tiny-minimax`, MiniMaxForCausalLM, and `tiny-kimi`, KimiLinearForCausalLM, 4 layers of random
weights each, `tiny-nemotron`, NemotronHForCausalLM, 6 blocks "M-M*ME": Mamba2, MLP,
Mamba2, NoPE attention, Mamba2, MoE, and `tiny-ling`, Ling's BailingMoeV3ForCausalLM, 4 layers:
KDA with the bounded gate, MLA with RoPE and a gate per head) and `recall` (models/hypic-recall: Qwen3_5ForCausalLM,
trained). The daemon is started and always stopped as the client's
own tests do it (tests/conftest.py, whose helpers are loaded from there, not copied).

Needs the pinned stack of requirements-e2e.txt (tests/client/test_frontend.sh makes it).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))  # transformers_frontend


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


fixture = _load("hypic_daemon_fixture", HERE.parent / "tests" / "conftest.py")
REPO: Path = fixture.REPO
EXAMPLES: Path = fixture.EXAMPLES
RECALL_DIR: Path = fixture.MODEL_DIR

CONFIG = f"""\
listen: 127.0.0.1:0
http_listen: ""
models: [{{name: tiny, path: var/models/tiny}}, {{name: tiny-moe, path: var/models/tiny-moe}},
         {{name: tiny-olmo, path: var/models/tiny-olmo}},
         {{name: tiny-minimax, path: var/models/tiny-minimax}},
         {{name: tiny-kimi, path: var/models/tiny-kimi}},
         {{name: tiny-nemotron, path: var/models/tiny-nemotron}},
         {{name: tiny-ling, path: var/models/tiny-ling}},
         {{name: recall, path: {RECALL_DIR}}}]
tiers: {{host: {{bytes: 64M, admit: always}}}}
executor: {{threads: 2}}
transport: {{max_buffer: 256M}}
log: {{requests: false}}
"""


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[fixture.Daemon]:  # type: ignore[name-defined]
    yield from fixture._serve(tmp_path_factory, "frontend", CONFIG)
