"""Test hosts on this machine: one network namespace per host, for e2e tests that cut a host off the network.

    root namespace                        namespace <prefix>-b1 (host "b1")
    ──────────────                        ─────────────────────────────────
    bridge <prefix>br ── <prefix>b1c ═══ cluster  10.201.0.2/24   the cluster network: hosts reach each other
    10.202.s.1/30  <prefix>b1m ═════════ mgmt     10.202.s.2/30   the management link: the test reaches the host

Each host has a veth on the bridge (the cluster network, a /24 shared by all hosts) and a
second veth pair straight to the root namespace (a /30 of its own), so the test still
reaches a host whose cluster link is cut. `cut(host)` sets the bridge's end of that link
down: the host loses carrier and what it sends into the cluster network is dropped
silently, as when a cable is pulled (no reset, no error: its calls time out). The bridge
has no address: the root namespace is on no cluster network, so the test cannot reach a
host through it by mistake.

`cut_between(a, b)` cuts two hosts from each other only, each still reaching every other
host: in each one's namespace, its cluster veth's egress to the other's address goes to a
class whose queue is a `blackhole` qdisc (tc: an htb root whose default class passes the
rest, a u32 filter per cut peer). Packets are dropped silently both ways, as by a cable
pulled between those two only. This needs no netfilter tool or tc action module (neither is
in every kernel or image): htb, u32 and blackhole, with iproute2's `tc`. Cuts are counted
per pair, so two faults that overlap each heal only their own.

Names begin with `ptn<pid>` (interface names have at most 15 characters): `Hosts.build`
first deletes what a run with the same pid, or with a pid no longer alive, left behind,
and `close` deletes everything, processes first, even after a failure. `netns_hosts` skips
a test where namespaces cannot be made (not root, or `ip netns add` refused); `built_hosts`
raises NetnsUnavailable saying why, for a run that must not pass without them (the nemesis run).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from deploy.supervisor import die_with_parent, log_tail
from tests.support.waiting import eventually

PREFIX = "ptn"
CLUSTER_NETWORK = ipaddress.IPv4Network("10.201.0.0/24")
MANAGEMENT_NETWORK = ipaddress.IPv4Network("10.202.0.0/16")
HOSTS_PER_BLOCK = 16
"""A run's management links take a /26 of MANAGEMENT_NETWORK: sixteen /30s, one per host."""
STOP_SECONDS = 10.0
PASS_CLASS, DROP_CLASS = 1, 2
"""htb classes of a host's cluster veth once it has a cut peer (`Hosts.cut_between`)."""
HOST_NAME = re.compile(r"[a-z][a-z0-9]{0,2}")
"""Short, so `<prefix><host>c` fits in 15 characters."""
LEFTOVER = re.compile(rf"{PREFIX}(\d+)")


class NetnsUnavailable(RuntimeError):
    """Test hosts cannot be made here (not root, no iproute2, `ip netns add` refused): the message says which."""


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    netns: str
    cluster_ip: str
    """Its address on the cluster network: what the other hosts call it by."""
    management_ip: str
    """Its end of the management link: what the test calls it by."""
    cluster_link: str
    """The bridge's end (in the root namespace) of its cluster veth: down is a cut."""
    management_link: str


@dataclass(frozen=True, slots=True)
class HostProcess:
    host: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self) -> str:
        return f"{self.log_path}:\n{log_tail(self.log_path, 30)}"


def ip(*argv: str) -> str:
    """`ip argv...`; RuntimeError with its stderr when it fails."""
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


class Hosts:
    """Hosts made of network namespaces, the processes run in them, and the links a test cuts and heals."""

    def __init__(self, log_dir: Path, names: Sequence[str]) -> None:
        assert len(names) <= HOSTS_PER_BLOCK, f"at most {HOSTS_PER_BLOCK} hosts"
        for name in names:
            assert HOST_NAME.fullmatch(name), f"host name {name!r}: a letter, then at most two letters or digits"
        self.prefix = f"{PREFIX}{os.getpid()}"
        self.log_dir = log_dir
        self.bridge = f"{self.prefix}br"
        block = self._free_block()
        self.hosts = {
            name: Host(
                name=name,
                netns=f"{self.prefix}-{name}",
                cluster_ip=str(CLUSTER_NETWORK[i + 1]),
                management_ip=str(block[4 * i + 2]),
                cluster_link=f"{self.prefix}{name}c",
                management_link=f"{self.prefix}{name}m",
            )
            for i, name in enumerate(names)
        }
        self._root_ips = {name: str(block[4 * i + 1]) for i, name in enumerate(names)}
        self.processes: list[HostProcess] = []
        self._cuts: Counter[tuple[str, str]] = Counter()
        """(host, peer) -> how many faults now cut host's egress to peer"""
        self._shaped: set[str] = set()
        """hosts whose cluster veth has the htb root that `cut_between` filters on"""

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def _free_block(self) -> ipaddress.IPv4Network:
        """A /26 of MANAGEMENT_NETWORK chosen by pid, past any that a live run's links hold in the root namespace."""
        blocks = list(MANAGEMENT_NETWORK.subnets(new_prefix=26))
        used = {ipaddress.IPv4Address(a.split("/")[0]) for a in re.findall(r"inet (\S+)", ip("-4", "-o", "addr"))}
        start = os.getpid() % len(blocks)
        for n in range(len(blocks)):
            block = blocks[(start + n) % len(blocks)]
            if not any(a in block for a in used):
                return block
        raise RuntimeError(f"every /26 of {MANAGEMENT_NETWORK} is in use")

    def build(self) -> None:
        """The bridge, each host's namespace and links; NetnsUnavailable where namespaces cannot be made."""
        remove_leftovers(self.prefix)
        first = next(iter(self.hosts.values()))
        try:
            ip("netns", "add", first.netns)
        except RuntimeError as exc:
            raise NetnsUnavailable(f"network namespaces cannot be made here: {exc}") from exc
        ip("link", "add", self.bridge, "type", "bridge")
        ip("link", "set", self.bridge, "up")
        for host in self.hosts.values():
            self._add(host, created=host is first)

    def _add(self, host: Host, *, created: bool) -> None:
        if not created:
            ip("netns", "add", host.netns)
        ns = host.netns
        ip("link", "add", host.cluster_link, "type", "veth", "peer", "name", "cluster", "netns", ns)
        ip("link", "set", host.cluster_link, "master", self.bridge, "up")
        ip("link", "add", host.management_link, "type", "veth", "peer", "name", "mgmt", "netns", ns)
        ip("addr", "add", f"{self._root_ips[host.name]}/30", "dev", host.management_link)
        ip("link", "set", host.management_link, "up")
        ip("-n", ns, "addr", "add", f"{host.cluster_ip}/{CLUSTER_NETWORK.prefixlen}", "dev", "cluster")
        ip("-n", ns, "addr", "add", f"{host.management_ip}/30", "dev", "mgmt")
        for link in ("lo", "cluster", "mgmt"):
            ip("-n", ns, "link", "set", link, "up")

    def run(self, host: str, argv: Sequence[str], env: Mapping[str, str], *, name: str) -> HostProcess:
        """`argv` started in `host`'s namespace (`ip netns exec`, which execs it: the pid is its own), with
        `env` over this process's environment; its output in `<log_dir>/<name>.log`."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log_file:
            process = subprocess.Popen(
                ["ip", "netns", "exec", self.hosts[host].netns, *argv],
                env=os.environ | dict(env) | {"PYTHONUNBUFFERED": "1"},
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - started from the test's one thread
            )
        started = HostProcess(host, process, log_path)
        self.processes.append(started)
        return started

    def cut(self, host: str) -> None:
        """`host` off the cluster network: its link's bridge end down (the host keeps its management link)."""
        ip("link", "set", self.hosts[host].cluster_link, "down")

    def heal(self, host: str) -> None:
        ip("link", "set", self.hosts[host].cluster_link, "up")

    def cut_between(self, a: str, b: str) -> None:
        """`a` and `b` cut from each other only (module docstring); each keeps every other link."""
        for host, peer in ((a, b), (b, a)):
            self._cuts[host, peer] += 1
            if self._cuts[host, peer] == 1:
                self._shape(host)
                tc(self.hosts[host].netns, "filter", "add", "dev", "cluster", "parent", "1:", "protocol", "ip",
                   "prio", str(self._filter_prio(peer)), "u32", "match", "ip", "dst",
                   f"{self.hosts[peer].cluster_ip}/32", "flowid", f"1:{DROP_CLASS}")  # fmt: skip

    def heal_between(self, a: str, b: str) -> None:
        """Undo one `cut_between(a, b)` (the pair is whole again once every cut of it is healed)."""
        for host, peer in ((a, b), (b, a)):
            assert self._cuts[host, peer] > 0, f"{host} and {peer} are not cut"
            self._cuts[host, peer] -= 1
            if self._cuts[host, peer] == 0:
                tc(self.hosts[host].netns, "filter", "del", "dev", "cluster", "parent", "1:", "prio",
                   str(self._filter_prio(peer)))  # fmt: skip

    def _filter_prio(self, peer: str) -> int:
        return list(self.hosts).index(peer) + 1

    def _shape(self, host: str) -> None:
        """An htb root on `host`'s cluster veth: a default class that passes everything, a class that drops."""
        if host in self._shaped:
            return
        ns = self.hosts[host].netns
        tc(ns, "qdisc", "add", "dev", "cluster", "root", "handle", "1:", "htb", "default", str(PASS_CLASS))
        for klass in (PASS_CLASS, DROP_CLASS):
            tc(ns, "class", "add", "dev", "cluster", "parent", "1:", "classid", f"1:{klass}", "htb", "rate",
               "100gbit", "quantum", "200000")  # fmt: skip
        tc(ns, "qdisc", "add", "dev", "cluster", "parent", f"1:{DROP_CLASS}", "handle", "2:", "blackhole")
        self._shaped.add(host)

    def close(self) -> None:
        """Every process stopped (SIGTERM, then SIGKILL), then every link and namespace deleted."""
        for started in reversed(self.processes):
            stop(started.process)
        self.processes.clear()
        remove_leftovers(self.prefix)


def tc(netns: str, *argv: str) -> None:
    """`tc argv...` in `netns`; RuntimeError with its stderr when it fails."""
    done = subprocess.run(["tc", "-n", netns, *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tc -n {netns} {' '.join(argv)}: {done.stderr.strip()}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def remove_leftovers(prefix: str) -> None:
    """Links and namespaces named by `prefix`, or by a `PREFIX<pid>` whose process is gone: deleted.

    The root namespace's ends of the veths are deleted first (each takes its peer along at
    once); a namespace, deleted, lets its own go only later."""
    links = [line.split(": ")[1].split("@")[0] for line in ip("-o", "link", "show").splitlines()]
    spaces = [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]
    stale = [name for name in links if _stale(name, prefix)]
    for link in sorted(stale, key=lambda name: name.endswith("br")):  # the bridge once its ports are gone
        with contextlib.suppress(RuntimeError):  # gone meanwhile, with its peer
            ip("link", "del", link)
    for space in spaces:
        if _stale(space, prefix):
            with contextlib.suppress(RuntimeError):
                ip("netns", "del", space)


def _stale(name: str, prefix: str) -> bool:
    found = LEFTOVER.match(name)
    return found is not None and (found.group(0) == prefix or not _alive(int(found.group(1))))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_netns_possible() -> None:
    """NetnsUnavailable naming what is missing: root (CAP_NET_ADMIN), iproute2's `ip` and `tc`."""
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if os.geteuid() != 0 or missing:
        raise NetnsUnavailable(
            "test hosts are network namespaces: they need root (CAP_NET_ADMIN) and iproute2 (`ip netns add`, `tc`)"
            + (f"; not found: {', '.join(missing)}" if missing else "; not root")
        )


@contextlib.contextmanager
def built_hosts(log_dir: Path, *names: str) -> Iterator[Hosts]:
    """Hosts `names`, built; deleted at the end however it ends. NetnsUnavailable where they cannot be made."""
    check_netns_possible()
    hosts = Hosts(log_dir, names)
    try:
        hosts.build()
        yield hosts
    finally:
        hosts.close()


@contextlib.contextmanager
def netns_hosts(log_dir: Path, *names: str) -> Iterator[Hosts]:
    """Hosts `names`, built; deleted at the end however the test ends. Skips the test without root or iproute2."""
    try:
        check_netns_possible()
    except NetnsUnavailable as exc:
        pytest.skip(str(exc))
    hosts = Hosts(log_dir, names)
    try:
        try:
            hosts.build()
        except NetnsUnavailable as exc:
            pytest.skip(str(exc))
        yield hosts
    finally:
        hosts.close()


async def serving(started: HostProcess, base_url: str, timeout: float = 30.0, *, path: str = "/healthz") -> None:
    """Until the process answers `base_url` + `path` (over its host's management link); fails at once if it exits."""
    async with httpx.AsyncClient(base_url=base_url, timeout=1.0) as client:

        async def healthy() -> bool:
            code = started.process.poll()
            assert code is None, f"it exited with code {code} while starting; {started.tail()}"
            try:
                return (await client.get(path)).status_code == 200
            except httpx.HTTPError:
                return False

        await eventually(healthy, f"{started.log_path.stem} answers {base_url}{path}", timeout, started.tail)
