"""hypic.cluster against the C rule (cluster/include/hy_cluster.h): the same score for the
vector tests/cluster/test_rendezvous.c checks, and the promises of rendezvous hashing. Then
hypic.Cluster against real clusters of three hypic-cached (conftest.py's way of starting
one): static members, where each entry must be where owners() says and every routed call
must find it; and members registered in etcd (when `etcd` is on PATH), where a member
killed with SIGKILL leaves the view within its lease's TTL and a prefill loop running
through the kill never fails. Every process started is killed at the end, also when a
test fails.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from conftest import EXAMPLES, LIMITS, MODEL_DIR, TLS, Daemon, spawn, start_daemon, stop_daemon

import hypic
from hypic import cluster
from hypic._gen import etcd_pb2

MODEL = "recall"
DOCS = [(EXAMPLES / f"doc{i}.txt").read_text() for i in range(1, 5)]
QUESTION = (EXAMPLES / "question.txt").read_text()
# more segments than members, so that every member owns some (recall's documents' style)
TEXTS = DOCS + [f"cedar dune DPB{n}; pond RQX{n + 7}; heath harbor.\n" for n in range(100, 108)]
IDS = ["m0", "m1", "m2"]


def key_of(i: int) -> bytes:
    return hashlib.sha256(struct.pack("<I", i)).digest()


def test_the_vector_the_c_test_checks() -> None:
    # tests/cluster/test_rendezvous.c, test_score_is_the_documented_hash
    assert cluster.score(key_of(7), "node-a") == 5752632589512009862


def test_owners_ranked_and_clipped() -> None:
    ids = ["a", "b", "c", "d", "e"]
    for k in range(100):
        key = key_of(k)
        top = cluster.owners(key, ids, 3)
        assert len(set(top)) == 3
        scores = [cluster.score(key, ids[i]) for i in top]
        assert scores == sorted(scores, reverse=True)
        assert cluster.owners(key, ids, 1) == top[:1]
        assert sorted(cluster.owners(key, ids, 9)) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        cluster.score(b"short", "a")


def test_a_join_moves_a_quarter_to_the_newcomer() -> None:
    ids = ["hypic-0", "hypic-1", "hypic-2", "hypic-3"]
    moved = 0
    for k in range(4000):
        before = ids[cluster.owners(key_of(k), ids[:3])[0]]
        after = ids[cluster.owners(key_of(k), ids)[0]]
        if before != after:
            assert after == "hypic-3"
            moved += 1
    assert 0.22 < moved / 4000 < 0.28


# ---- Cluster, without a daemon ---------------------------------------------------------


def test_cluster_arguments() -> None:
    for bad in (
        lambda: hypic.Cluster(),
        lambda: hypic.Cluster({"a": "127.0.0.1:1"}, etcd=["127.0.0.1:2"]),
        lambda: hypic.Cluster({}),
        lambda: hypic.Cluster({"a": "127.0.0.1:1"}, replicas=0),
        lambda: hypic.Cluster(etcd=["127.0.0.1:2"], etcd_password="pw"),
        lambda: hypic.Cluster(etcd=["127.0.0.1:2"], etcd_tls_server_name="etcd"),
        lambda: hypic.Cluster(etcd=["127.0.0.1:2"], etcd_tls_root_pem=b"x", etcd_tls_cert_pem=b"y"),
    ):
        with pytest.raises(hypic.HypicError) as e:
            bad()
        assert e.value.code == "INVALID_ARGUMENT"
    assert cluster._prefix_end(b"/hypic/members/") == b"/hypic/members0"
    assert cluster._prefix_end(b"a\xff") == b"b"


def test_cluster_of_gone_members_misses() -> None:
    with hypic.Cluster({"a": "127.0.0.1:1", "b": "127.0.0.1:2"}, replicas=2, timeout=5) as cl:
        key = key_of(1)
        assert sorted(cl.owners(key)) == ["a", "b"]
        with pytest.raises(hypic.HypicError) as nf:
            cl.get_entry(MODEL, key)
        assert nf.value.code == "NOT_FOUND"  # gone members are a miss, never an error
        r = cl.lookup(MODEL, [key])
        assert not r.segments[0].hit and r.segments[0].key == key and r.leading_hits == 0
        with pytest.raises(hypic.HypicError) as un:
            cl.prefill(MODEL, ["a segment"], "?")
        assert un.value.code == "UNAVAILABLE"
        with pytest.raises(hypic.HypicError) as nm:
            cl.client("c")
        assert nm.value.code == "NOT_FOUND"


def test_etcd_unreachable_is_unavailable() -> None:
    with pytest.raises(hypic.HypicError) as e:
        hypic.Cluster(etcd=[f"127.0.0.1:{free_ports(1)[0]}"])
    assert e.value.code == "UNAVAILABLE"


# ---- three members, static -------------------------------------------------------------



def free_ports(n: int) -> list[int]:
    """n loopback ports free now (bound together, so distinct, then released)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def member_config(listen: str, cluster_yaml: str) -> str:
    """conftest's daemon configuration, listening on `listen`, with a cluster: section."""
    return f"""\
listen: {listen}
http_listen: ""
models: [{{name: {MODEL}, path: {MODEL_DIR}}}]
tiers: {{host: {{bytes: 64M, admit: always}}}}
executor: {{threads: 1}}
{LIMITS}
log: {{requests: false}}
cluster: {cluster_yaml}
"""


def start_members(tmp: Path, configs: dict[str, str], started: list[Daemon]) -> dict[str, Daemon]:
    """Starts a daemon per config, each appended to started as it starts (for the
    caller's finally to kill, also when a later one fails)."""
    out = {}
    for mid, config in configs.items():
        (tmp / mid).mkdir()
        out[mid] = start_daemon(tmp / mid, config)
        started.append(out[mid])
    return out


@pytest.fixture(scope="module")
def static_members(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Daemon]]:
    """m0, m1, m2: cluster.members lists all three on ports picked beforehand."""
    addrs = {mid: f"127.0.0.1:{p}" for mid, p in zip(IDS, free_ports(len(IDS)))}
    listed = ", ".join(f"{{id: {mid}, address: '{a}'}}" for mid, a in addrs.items())
    configs = {mid: member_config(f"'{addrs[mid]}'", f"{{id: {mid}, members: [{listed}]}}") for mid in IDS}
    started: list[Daemon] = []
    try:
        yield start_members(tmp_path_factory.mktemp("static"), configs, started)
    finally:
        dead = [d for d in started if d.proc.poll() is not None]
        for d in started:
            stop_daemon(d)
        if dead:
            pytest.fail(f"a member died during the tests; its log:\n{dead[0].log()}")


@pytest.fixture
def static_cluster(static_members: dict[str, Daemon]) -> Iterator[hypic.Cluster]:
    """A Cluster of the static members, whose stores start each test empty."""
    with hypic.Cluster({mid: d.addr for mid, d in static_members.items()}, timeout=60) as cl:
        for mid in IDS:
            cl.client(mid).invalidate(all_of_tenant=True)
        yield cl


def stored_on(cl: hypic.Cluster, mid: str) -> set[bytes]:
    return {m.key for m in cl.client(mid).list_all(model=MODEL)}


def wait_until(cond, timeout: float, step: float = 0.05):  # type: ignore[no-untyped-def]
    """cond() once it is truthy, polling; its last (falsy) value after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(step)


def test_static_entries_live_on_their_owners(static_cluster: hypic.Cluster) -> None:
    cl = static_cluster
    progress = list(cl.client("m0").warm(MODEL, TEXTS))  # all through one member
    assert [p.state for p in progress] == [hypic.WarmState.BUILT] * len(TEXTS)
    keys = [p.key for p in progress]
    owner = {k: cl.owners(k)[0] for k in keys}
    assert set(owner.values()) == set(IDS), "the texts should spread over every member"
    assert all(p.member == owner[p.key] for p in progress)
    # the owner's list holds it (put there in the background when m0 is not the owner)
    for mid in IDS:
        mine = {k for k in keys if owner[k] == mid}
        assert wait_until(lambda: mine <= stored_on(cl, mid), 10), (mid, mine - stored_on(cl, mid))

    for k in keys:  # through Cluster: from the owner, the bytes the owner holds
        e = cl.get_entry(MODEL, k)
        assert e.key == k and e.data == cl.client(owner[k]).get_entry(MODEL, k).data
    with pytest.raises(hypic.HypicError) as nf:
        cl.get_entry(MODEL, key_of(99))
    assert nf.value.code == "NOT_FOUND"

    r = cl.lookup(MODEL, keys + [key_of(99)])  # by key: one Lookup per owner
    assert [s.hit for s in r.segments] == [True] * len(keys) + [False]
    assert [s.key for s in r.segments] == keys + [key_of(99)]
    assert [s.member for s in r.segments[: len(keys)]] == [owner[k] for k in keys]
    assert r.leading_hits == len(keys) and r.leading_tokens == sum(len(t.encode()) for t in TEXTS)
    by_tokens = cl.lookup(MODEL, TEXTS)  # by tokens: one member, which asks the owners
    assert all(s.hit for s in by_tokens.segments) and [s.key for s in by_tokens.segments] == keys


def test_static_put_entry_lands_on_the_owner(static_cluster: hypic.Cluster) -> None:
    cl = static_cluster
    keys = [p.key for p in cl.warm(MODEL, TEXTS[:6])]
    assert len(keys) == 6
    for k in keys:
        wait_until(lambda: cl.lookup(MODEL, [k]).segments[0].hit, 10)
        e = cl.get_entry(MODEL, k)
        for mid in IDS:  # gone from everywhere (warm may leave a copy where it ran)
            cl.client(mid).invalidate(key=k)
        r = cl.put_entry(e)
        own = cl.owners(k)[0]
        assert r.key == k and r.member == own
        assert [mid for mid in IDS if k in stored_on(cl, mid)] == [own]
        assert cl.get_entry(MODEL, k).data == e.data


def test_static_prefill_and_warm_round_robin(static_cluster: hypic.Cluster) -> None:
    cl = static_cluster
    progress = list(cl.warm(MODEL, DOCS))
    assert [p.index for p in progress] == [0, 1, 2, 3]
    assert wait_until(lambda: cl.lookup(MODEL, [p.key for p in progress]).leading_hits == 4, 10)
    for _ in IDS:  # each member in turn answers from the owners' entries
        r = cl.prefill(MODEL, DOCS[::-1], QUESTION, max_new_tokens=3)
        assert all(s.kind == hypic.OutcomeKind.HIT for s in r.segments)
        assert hypic.detokenize(r.generated) == "002"


def test_static_view_with_a_gone_member(static_members: dict[str, Daemon]) -> None:
    # the view holds m3, which is not there (and which the daemons do not know): calls
    # that reach it in turn move on; with replicas=2 the last owner asked answers by
    # the daemons' own view, so every entry is still found
    view = {mid: d.addr for mid, d in static_members.items()}
    view["m3"] = f"127.0.0.1:{free_ports(1)[0]}"
    with hypic.Cluster(view, replicas=2, timeout=60) as cl:
        for mid in IDS:
            cl.client(mid).invalidate(all_of_tenant=True)
        keys: list[bytes] = []
        for i in range(len(view)):  # each member in turn starts one, m3 included
            progress = list(cl.warm(MODEL, TEXTS[2 * i : 2 * i + 2]))
            assert [p.index for p in progress] == [0, 1]
            assert all(p.state == hypic.WarmState.BUILT for p in progress)
            keys += [p.key for p in progress]
        assert any("m3" in cl.owners(k) for k in keys)
        assert wait_until(lambda: cl.lookup(MODEL, keys).leading_hits == len(keys), 10)
        for k in keys:
            assert cl.get_entry(MODEL, k).key == k
        for _ in view:
            r = cl.prefill(MODEL, DOCS[:2], QUESTION, max_new_tokens=1)
            assert all(s.kind == hypic.OutcomeKind.HIT for s in r.segments)


# ---- three members in etcd ---------------------------------------------------------------

TTL_S = 2


def start_etcd(tmp: Path, tls: bool = False) -> tuple[subprocess.Popen[bytes], str]:
    """A one-node etcd on free ports, serving TLS with tests/fixtures/tls's server
    certificate when asked: its process and client endpoint, once it answers (the
    caller kills it). The ports are free when picked, not when etcd binds them a moment
    later (another test's port-0 listener may take one first): a start that fails is
    tried twice more on other ports, as tests/etcd_fixture.h does."""
    exe = shutil.which("etcd")
    if exe is None:
        pytest.skip("etcd is not on PATH (Debian: etcd-server): the etcd membership is not tested")
    logs = []
    for attempt in range(3):
        started = _try_etcd(exe, tmp / f"etcd{attempt}", tls)
        if isinstance(started, tuple):
            return started
        logs.append(f"attempt {attempt + 1}:\n{started}")
    pytest.fail("etcd did not start; its logs:\n" + "\n".join(logs))


def _try_etcd(exe: str, dir: Path, tls: bool) -> tuple[subprocess.Popen[bytes], str] | str:
    """etcd in dir on two ports picked now: its process and endpoint once it answers a
    Range, or its log when it exits or stays silent for 20 s (and is killed)."""
    dir.mkdir()
    client_port, peer_port = free_ports(2)
    cu = f"{'https' if tls else 'http'}://127.0.0.1:{client_port}"
    pu = f"http://127.0.0.1:{peer_port}"
    more = ["--cert-file", str(TLS / "server.pem"), "--key-file", str(TLS / "server.key")] if tls else []
    with open(dir / "etcd.log", "wb") as log:
        proc = spawn(
            [exe, "--name", "t", "--data-dir", str(dir / "etcd-data"),
             "--listen-client-urls", cu, "--advertise-client-urls", cu,
             "--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
             "--initial-cluster", f"t={pu}", "--heartbeat-interval", "50", "--election-timeout", "250",
             *more],
            dir, log,
        )  # fmt: skip
    endpoint = f"127.0.0.1:{client_port}"
    try:
        creds = grpc.ssl_channel_credentials((TLS / "ca.pem").read_bytes()) if tls else None
        with grpc.secure_channel(endpoint, creds) if creds else grpc.insecure_channel(endpoint) as ch:
            rng = ch.unary_unary(
                "/etcdserverpb.KV/Range",
                request_serializer=etcd_pb2.RangeRequest.SerializeToString,
                response_deserializer=etcd_pb2.RangeResponse.FromString,
            )

            def ready() -> bool:
                try:
                    rng(etcd_pb2.RangeRequest(key=b"x"), timeout=1)
                    return True
                except grpc.RpcError:
                    return proc.poll() is not None

            up = wait_until(ready, 20, 0.1) and proc.poll() is None
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if up:
        return proc, endpoint
    proc.kill()
    proc.wait()
    return (dir / "etcd.log").read_text(errors="replace")


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[str]:
    """A one-node etcd on free ports (its client endpoint), killed at the end."""
    proc, endpoint = start_etcd(tmp_path)
    try:
        yield endpoint
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def etcd_members(etcd: str, tmp_path: Path) -> Iterator[dict[str, Daemon]]:
    """e0, e1, e2 registered in etcd with a TTL_S lease, listening on ports of their own."""
    configs = {
        mid: member_config("127.0.0.1:0", f"{{id: {mid}, etcd: {{endpoints: '{etcd}', ttl_s: {TTL_S}}}}}")
        for mid in ("e0", "e1", "e2")
    }
    started: list[Daemon] = []
    try:
        yield start_members(tmp_path, configs, started)
    finally:
        for d in started:
            stop_daemon(d)


def test_etcd_view_follows_a_death(etcd: str, etcd_members: dict[str, Daemon]) -> None:
    want = {mid: d.addr for mid, d in etcd_members.items()}
    with hypic.Cluster(etcd=[etcd], timeout=30) as cl:
        assert wait_until(lambda: cl.members() == want, 10) == True, cl.members()  # noqa: E712
        list(cl.warm(MODEL, DOCS))
        ok, failures, stop = [0], [], threading.Event()

        def prefill_loop() -> None:
            while not stop.is_set():
                try:
                    r = cl.prefill(MODEL, DOCS[:2], QUESTION, max_new_tokens=1)
                    assert len(r.segments) == 2
                    ok[0] += 1
                except Exception as e:  # counted, not raised: the thread must go on
                    failures.append(e)

        loop = threading.Thread(target=prefill_loop)
        loop.start()
        try:
            assert wait_until(lambda: ok[0] >= 6, 30), "the prefill loop makes no progress"
            victim = etcd_members["e1"]
            os.kill(victim.proc.pid, 9)
            victim.proc.wait()
            killed, at_kill = time.monotonic(), ok[0]
            with pytest.raises(hypic.HypicError) as dead:
                cl.client("e1").health()  # in the view, but gone: what the loop meets in turn
            assert dead.value.code == "UNAVAILABLE"
            gone = wait_until(lambda: "e1" not in cl.members(), TTL_S + 8)
            took, meanwhile = time.monotonic() - killed, ok[0] - at_kill
            assert meanwhile >= 3, f"{meanwhile} prefills while the dead e1 was in the view"
            assert gone, f"e1 still in the view {took:.1f} s after its death"
            assert took <= TTL_S + 2.5, f"e1 left the view {took:.1f} s after its death (TTL {TTL_S} s)"
            assert cl.members() == {k: v for k, v in want.items() if k != "e1"}
            print(f"e1 left the view {took:.2f} s after SIGKILL; {meanwhile} prefills meanwhile")
            after = ok[0]
            assert wait_until(lambda: ok[0] >= after + 6, 30), "the prefill loop stalled after the death"
        finally:
            stop.set()
            loop.join(60)
        assert failures == [], failures[:3]
        r = cl.lookup(MODEL, DOCS)  # the two left still answer for every document
        assert len(r.segments) == 4 and all(s.member != "e1" for s in r.segments)


# ---- etcd over TLS, with auth on ------------------------------------------------------------


def etcdctl(endpoint: str, *args: str, user: str | None = "root:root-password-0") -> None:
    """etcdctl (Debian: etcd-client) against the TLS etcd at endpoint, as root once auth is on."""
    cmd = ["etcdctl", f"--endpoints=https://{endpoint}", f"--cacert={TLS / 'ca.pem'}"]
    if user:
        cmd.append(f"--user={user}")
    r = subprocess.run([*cmd, *args], env={**os.environ, "ETCDCTL_API": "3"},
                       capture_output=True, text=True, timeout=30)  # fmt: skip
    assert r.returncode == 0, f"etcdctl {' '.join(args)}: {r.stdout}{r.stderr}"


def test_etcd_over_tls_as_a_reader(tmp_path: Path) -> None:
    """A member registers in an etcd that serves TLS with auth on, as a user that may write
    the prefix; the Cluster follows the set as a user that may only read it. A wrong
    password is INVALID_ARGUMENT naming the user, plaintext UNAVAILABLE."""
    if shutil.which("etcdctl") is None:
        pytest.skip("etcdctl is not on PATH (Debian: etcd-client): etcd's auth is not tested")
    proc, ep = start_etcd(tmp_path, tls=True)
    started: list[Daemon] = []
    try:
        for step in (
            ["user", "add", "root", "--new-user-password=root-password-0"],
            ["role", "add", "root"],
            ["user", "grant-role", "root", "root"],
            ["role", "add", "member"],
            ["role", "grant-permission", "member", "--prefix=true", "readwrite", "/hypic/"],
            ["user", "add", "hypic", "--new-user-password=hypic-etcd-password-1"],
            ["user", "grant-role", "hypic", "member"],
            ["role", "add", "reader"],
            ["role", "grant-permission", "reader", "--prefix=true", "read", "/hypic/members/"],
            ["user", "add", "reader", "--new-user-password=reader-password-2"],
            ["user", "grant-role", "reader", "reader"],
        ):
            etcdctl(ep, *step, user=None)
        etcdctl(ep, "auth", "enable", user=None)
        pw = tmp_path / "etcd.password"
        pw.write_text("hypic-etcd-password-1\n")
        etcd_yaml = (f"{{endpoints: '{ep}', ttl_s: {TTL_S}, tls_ca: {TLS / 'ca.pem'}, user: hypic, "
                     f"password_file: {pw}}}")  # fmt: skip
        m = start_members(tmp_path, {"t0": member_config("127.0.0.1:0", f"{{id: t0, etcd: {etcd_yaml}}}")}, started)
        ca = (TLS / "ca.pem").read_bytes()
        with hypic.Cluster(etcd=[ep], etcd_tls_root_pem=ca, etcd_user="reader",
                           etcd_password="reader-password-2", timeout=30) as cl:  # fmt: skip
            assert cl.members() == {"t0": m["t0"].addr}
            r = cl.lookup(MODEL, DOCS[:2])
            assert len(r.segments) == 2
        with pytest.raises(hypic.HypicError) as wrong:
            hypic.Cluster(etcd=[ep], etcd_tls_root_pem=ca, etcd_user="reader", etcd_password="wrong")
        assert wrong.value.code == "INVALID_ARGUMENT"
        assert "user 'reader'" in wrong.value.message and "authentication failed" in wrong.value.message
        with pytest.raises(hypic.HypicError) as plain:
            hypic.Cluster(etcd=[ep], etcd_user="reader", etcd_password="reader-password-2")
        assert plain.value.code == "UNAVAILABLE"
        with pytest.raises(hypic.HypicError) as nobody:
            hypic.Cluster(etcd=[ep], etcd_tls_root_pem=ca)
        assert nobody.value.code == "UNAVAILABLE" and "user name is empty" in nobody.value.message
        print(f"wrong password: {wrong.value.message}\nno user: {nobody.value.message}")
    finally:
        for d in started:
            stop_daemon(d)
        proc.kill()
        proc.wait()
