"""The etcd of a replicated cluster: its members' command lines, and the private etcd `petrel up --replicas` starts.

Debian's `etcd-server` (binary `etcd`, 3.4) runs each member. `member_command` is the one
definition of how a member is started (tests/support/etcd.py starts its test clusters
with it too). `petrel up --replicas R` starts `--etcd-members N` members (3 by default)
on loopback unless PETREL_ETCD_ENDPOINTS names an etcd to use: member i's client port is
`--etcd-port + 2i` and its peer port the one after (2379/2380, 2381/2382, 2383/2384 by
default), its data `<data_dir>/etcd/member-<i+1>`.

A restart on the same data dir reuses the members' data, so the controller's state
survives it: a member whose data dir holds a member already ignores the cluster flags
(`--initial-cluster`, `--initial-cluster-state new`) and rejoins with what it recorded,
which is why every start, the first and every later one, gives `new`. `existing` is for a
member *added* to a running cluster (`etcdctl member add` first); `petrel up` never adds
one, so it refuses the cases that would need it instead of letting a member bootstrap a
second, empty cluster beside the first: some members with data and some without (a lost
data dir: remove and add that member with etcdctl, or delete `<data_dir>/etcd` to start an
empty etcd), or the ports the members were created with changed (etcd keeps its peers'
URLs in its data).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import httpx

from libs.etcd.settings import EtcdSettings

PACKAGE = "etcd-server"
BINARY = "etcd"
DEFAULT_PORT = 2379
DEFAULT_MEMBERS = 3
HEARTBEAT_MS = 50
ELECTION_MS = 500
"""Half etcd's defaults (100/1000 ms), so that a killed raft leader is replaced (in 0.5 to 1 s) before a master's
lease can lapse (libs.etcd.lease_keeper: 1.25 s after its last answered keep-alive); with the defaults the leader's
loss paused every write for 1 to 3 s. Pre-vote keeps a member that missed heartbeats (a loaded machine) from
deposing a live leader: it first asks whether the others would vote."""
MEMBERS_FILE = "members.json"
"""`<data_dir>/etcd/members.json`: the members' names and peer URLs the private etcd was created with."""


class EtcdNotAvailable(RuntimeError):
    pass


def etcd_binary(path: str | None = None) -> str:
    """The `etcd` on PATH (or `path`), or EtcdNotAvailable naming the package to install."""
    binary = shutil.which(BINARY, path=path)
    if binary is None:
        raise EtcdNotAvailable(
            f"etcd is not installed: install Debian's {PACKAGE} (`apt-get install -y {PACKAGE}`; `make run` and "
            "`make test` do it when run as root), or set PETREL_ETCD_ENDPOINTS to a running etcd"
        )
    return binary


@dataclass(frozen=True, slots=True)
class EtcdMember:
    """One member of an etcd cluster on this machine: its name, where it keeps its data, its two URLs."""

    name: str
    data_dir: Path
    client_url: str
    peer_url: str


def member_command(
    member: EtcdMember,
    cluster: list[EtcdMember],
    token: str,
    *,
    binary: str = BINARY,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """`etcd` running `member` of `cluster` (its members' peer URLs make `--initial-cluster`); `token` keeps it
    apart from other clusters' members; `extra` flags go last (TLS, auth token TTL)."""
    initial = ",".join(f"{m.name}={m.peer_url}" for m in cluster)
    return [
        binary,
        f"--name={member.name}",
        f"--data-dir={member.data_dir}",
        f"--listen-client-urls={member.client_url}",
        f"--advertise-client-urls={member.client_url}",
        f"--listen-peer-urls={member.peer_url}",
        f"--initial-advertise-peer-urls={member.peer_url}",
        f"--initial-cluster={initial}",
        "--initial-cluster-state=new",  # ignored once the data dir holds a member (module docstring)
        f"--initial-cluster-token={token}",
        f"--heartbeat-interval={HEARTBEAT_MS}",
        f"--election-timeout={ELECTION_MS}",
        "--pre-vote",
        "--logger=zap",
        "--log-level=warn",
        "--log-outputs=stderr",
        *extra,
    ]


ENV_PREFIX = "ETCD_"
"""etcd reads ETCD_* variables as flags, and one beside the same flag stops it: members are started without them."""


def member_env(environ: dict[str, str]) -> dict[str, str]:
    """`environ` without ETCD_* variables."""
    return {name: value for name, value in environ.items() if not name.startswith(ENV_PREFIX)}


def private_members(data_dir: Path, count: int, first_port: int, host: str = "127.0.0.1") -> list[EtcdMember]:
    """The private etcd's members: member-1 on `first_port` (client) and the port after (peer), and so on."""
    if count < 1:
        raise ValueError(f"--etcd-members {count}: an etcd needs at least one member")
    if not 0 < first_port <= 65_535 - 2 * count + 1:
        raise ValueError(f"--etcd-port {first_port}: {2 * count} ports from there do not fit below 65536")
    return [
        EtcdMember(
            f"member-{i + 1}",
            data_dir / "etcd" / f"member-{i + 1}",
            f"http://{host}:{first_port + 2 * i}",
            f"http://{host}:{first_port + 2 * i + 1}",
        )
        for i in range(count)
    ]


def private_token(data_dir: Path) -> str:
    """The private etcd's cluster token: the same for every start on the same data dir, another for another."""
    return "petrel-" + hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]


def has_data(member: EtcdMember) -> bool:
    """Whether the member's data dir holds a member already (etcd's `member/` with its WAL and snapshots)."""
    return (member.data_dir / "member").is_dir()


def check_member_data(data_dir: Path, members: list[EtcdMember]) -> None:
    """Refuse, before anything starts, a start that would need a member added (module docstring): some members
    with data and some without, data of more members than planned, or members created on other ports. Records the
    members' peer URLs at the first start."""
    root = data_dir / "etcd"
    with_data = [m for m in members if has_data(m)]
    planned = {m.data_dir.name for m in members}
    more = sorted(p.name for p in root.glob("member-*") if p.name not in planned and (p / "member").is_dir())
    if more:
        raise ValueError(
            f"{root} holds the data of {len(planned) + len(more)} etcd members ({', '.join(more)} among them) and "
            f"--etcd-members is {len(members)}: give the number it was created with, or delete {root} to start an "
            "empty etcd (the replication state in it is lost)"
        )
    recorded = root / MEMBERS_FILE
    if not with_data:
        root.mkdir(parents=True, exist_ok=True)
        recorded.write_text(json.dumps({m.name: m.peer_url for m in members}, indent=2) + "\n")
        return
    if len(with_data) < len(members):
        lost = ", ".join(str(m.data_dir) for m in members if m not in with_data)
        raise ValueError(
            f"etcd members without data ({lost}) beside members with data: a member that lost its data must be "
            f"removed and added again (etcdctl member remove / member add), or delete {root} to start an empty "
            "etcd (the replication state in it is lost)"
        )
    try:
        peers = json.loads(recorded.read_text())
    except (OSError, ValueError):
        return  # made by hand or by an older petrel: the members know their peers
    planned_peers = {m.name: m.peer_url for m in members}
    if peers != planned_peers:
        ports = [int(url.rsplit(":", 1)[-1]) for url in peers.values() if url.rsplit(":", 1)[-1].isdigit()]
        hint = f"start with --etcd-port {min(ports) - 1}" if ports else f"delete {root} to start an empty etcd"
        raise ValueError(
            f"the etcd members in {root} were created with the peer URLs {peers} (see {recorded}), not "
            f"{planned_peers}: etcd keeps its peers' URLs in its data; {hint}"
        )


def etcd_refusal(settings: EtcdSettings, timeout: float = 2.0) -> str | None:
    """Why the etcd `settings` name cannot be used (no member answers GET /health with its TLS), else None."""
    failures = []
    for endpoint in settings.endpoints:
        try:
            with httpx.Client(verify=settings.tls_context(), trust_env=False, timeout=timeout) as client:
                reply = client.get(f"{endpoint}/health")
        except (httpx.HTTPError, OSError) as exc:
            failures.append(f"{endpoint}: {exc or type(exc).__name__}")
            continue
        if reply.status_code == 200:
            return None
        failures.append(f"{endpoint}: {reply.status_code} {reply.text[:200]}")
    return "no member of the etcd in PETREL_ETCD_ENDPOINTS is healthy: " + "; ".join(failures)
