"""Builds the hypic package, generating its gRPC stubs from rpc/hypic.proto.

The proto is the contract and lives once, in the repository's rpc/ folder; the stubs
are made from it at build time (build_py) with grpc_tools.protoc into hypic/_gen/:
hypic_pb2.py and .pyi (messages, with type stubs) and hypic_pb2_grpc.py (the
service). protoc writes the grpc module with an absolute `import hypic_pb2`, which
works only when _gen/ is on sys.path, so it is rewritten to a relative import.

The same is done for rpc/etcd.proto (etcd_pb2*.py: the slice of etcd's v3 API that
hypic.Cluster reads its members from), which is found beside hypic.proto.

Where the proto is found, first match: $HYPIC_PROTO; ../../rpc/hypic.proto (a
checkout: `pip install client/python`); ./hypic.proto (an sdist, which carries a
copy of both: see Sdist below). Everything else is in pyproject.toml.
"""

import os
import re
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
PROTO_NAME = "hypic.proto"
ETCD_PROTO_NAME = "etcd.proto"  # beside hypic.proto, wherever that is found


def find_proto() -> Path:
    candidates = [Path(p) for p in [os.environ.get("HYPIC_PROTO", "")] if p]
    candidates += [HERE.parent.parent / "rpc" / PROTO_NAME, HERE / PROTO_NAME]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    raise SystemExit(
        "hypic: cannot find hypic.proto (looked at "
        + ", ".join(str(c) for c in candidates)
        + "); set HYPIC_PROTO to its path"
    )


def generate_stubs(out_dir: Path) -> None:
    """Writes {hypic,etcd}_pb2.py, _pb2.pyi and _pb2_grpc.py into out_dir."""
    hypic = find_proto()
    etcd = hypic.parent / ETCD_PROTO_NAME
    if not etcd.is_file():
        raise SystemExit(f"hypic: cannot find {ETCD_PROTO_NAME} beside {hypic}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for proto in (hypic, etcd):
        generate_one(proto, out_dir)


def generate_one(proto: Path, out_dir: Path) -> None:
    """protoc on one proto; its grpc module's import of the messages made relative."""
    import grpc_tools
    from grpc_tools import protoc

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{proto.parent}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(proto),
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"hypic: grpc_tools.protoc failed on {proto}")

    mod = proto.stem + "_pb2"
    grpc_py = out_dir / f"{mod}_grpc.py"
    text = grpc_py.read_text()
    fixed, n = re.subn(rf"^import {mod} as ", f"from . import {mod} as ", text, flags=re.MULTILINE)
    # etcd.proto declares messages only (the client names etcd's methods itself), so its
    # grpc module imports nothing; a proto with a service imports its messages once
    want = 1 if "\nservice " in proto.read_text() else 0
    if n != want:  # protoc changed how it writes the import: fail here, not at import time
        raise SystemExit(f"hypic: {grpc_py}: expected {want} 'import {mod} as', found {n}")
    grpc_py.write_text(fixed)


class BuildPyWithStubs(build_py):
    """build_py, then the stubs: into the build tree, or the source tree when editable."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            generate_stubs(HERE / "hypic" / "_gen")
        else:
            generate_stubs(Path(self.build_lib) / "hypic" / "_gen")


class SdistWithProto(sdist):
    """An sdist carries a copy of the protos, so that it builds away from the checkout."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        proto = find_proto()
        for name in (PROTO_NAME, ETCD_PROTO_NAME):
            (Path(base_dir) / name).write_bytes((proto.parent / name).read_bytes())


setup(cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProto})
