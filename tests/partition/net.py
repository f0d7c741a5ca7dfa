"""Hosts as Linux network namespaces joined by point-to-point veth links (issue 35 part 8).

Each host is a namespace ``hpt<pid>-<host>`` with only ``lo`` and one veth end per link; a
link between hosts A and B is its own /24 (``10.213.<n>.1`` on A, ``.2`` on B), so cutting
one link (``ip link set … down`` on both ends) partitions exactly that pair and nothing else:
packets are dropped, no RST, as a pulled cable. Nothing is attached to the machine's own
namespace, so no traffic leaves the namespaces.

The test process reaches into a namespace two ways: ``popen`` runs a program there (``ip netns
exec``), and ``call`` runs a Python function on a thread that ``setns()``-ed into it (network
namespaces are per thread on Linux), so the checker and the probes need no subprocess.

``cleanup`` always runs (a fixture finalizer) and also removes the namespaces of earlier runs
whose process is gone (a run killed with SIGKILL leaves them behind)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
PREFIX = "hpt"  # every namespace this suite makes starts with it: hpt<pid>-<host>
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def unavailable() -> str | None:
    """Why namespaces cannot be used here (the skip reason), or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) to make network namespaces"
    probe = f"{PREFIX}{os.getpid()}-probe"
    try:
        _ip("netns", "add", probe)
        try:
            _ip("-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1")
        finally:
            _ip("netns", "del", probe, check=False)
    except subprocess.CalledProcessError as err:
        return f"cannot make a network namespace with a veth pair: {err.stderr.strip()}"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def clean_stale() -> list[str]:
    """Delete the namespaces of earlier runs whose process no longer exists; their names."""
    gone: list[str] = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX) or "-" not in name:
            continue
        pid = name[len(PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or alive(int(pid)):
            continue
        _kill_inside(name)
        _ip("netns", "del", name, check=False)
        gone.append(name)
    return gone


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_inside(ns: str) -> None:
    """SIGKILL whatever still runs in ``ns`` (a server of a killed run)."""
    pids = _ip("netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), 9)


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    subnet: int  # 10.213.<subnet>.0/24

    def dev(self, host: str) -> str:
        """The veth end's name inside ``host``: ``to-<other host>`` (at most 15 bytes)."""
        return ("to-" + (self.b if host == self.a else self.a))[:15]

    def addr(self, host: str) -> str:
        return f"10.213.{self.subnet}.{1 if host == self.a else 2}"


class Net:
    """Hosts and the links between them; ``addr(host, seen_from)`` is how one reaches the other."""

    def __init__(self, hosts: Sequence[str], links: Sequence[tuple[str, str]]) -> None:
        self.tag = f"{PREFIX}{os.getpid()}"
        self.hosts = list(hosts)
        self.links = {frozenset(pair): Link(pair[0], pair[1], n + 1) for n, pair in enumerate(links)}
        self.procs: list[subprocess.Popen[bytes]] = []
        self._made: list[str] = []

    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def link(self, a: str, b: str) -> Link:
        return self.links[frozenset((a, b))]

    def addr(self, host: str, seen_from: str) -> str:
        """``host``'s address on its link to ``seen_from``."""
        return self.link(host, seen_from).addr(host)

    def up(self) -> Net:
        clean_stale()
        for host in self.hosts:
            _ip("netns", "add", self.ns(host))
            self._made.append(self.ns(host))
            _ip("-n", self.ns(host), "link", "set", "lo", "up")
        for link in self.links.values():
            na, nb = self.ns(link.a), self.ns(link.b)
            _ip("-n", na, "link", "add", link.dev(link.a), "type", "veth",
                "peer", "name", link.dev(link.b), "netns", nb)
            for host, ns in ((link.a, na), (link.b, nb)):
                _ip("-n", ns, "addr", "add", f"{link.addr(host)}/24", "dev", link.dev(host))
                _ip("-n", ns, "link", "set", link.dev(host), "up")
        return self

    def set_link(self, a: str, b: str, up: bool) -> None:
        """Take the link between ``a`` and ``b`` down (both ends: a cut cable) or up again."""
        link = self.link(a, b)
        for host in (link.a, link.b):
            _ip("-n", self.ns(host), "link", "set", link.dev(host), "up" if up else "down")

    def heal(self) -> None:
        """Every link up."""
        for link in self.links.values():
            self.set_link(link.a, link.b, True)

    def popen(self, host: str, args: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start ``args`` inside ``host``; ``cleanup`` kills it if it still runs."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(host), *args], **kwargs)
        self.procs.append(proc)
        return proc

    def run(self, host: str, args: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", self.ns(host), *args], capture_output=True,
                              text=True, **kwargs)

    def enter(self, host: str) -> Callable[[], None]:
        """A function that moves the calling thread (or a child before exec) into ``host``."""
        path = f"/run/netns/{self.ns(host)}"

        def go() -> None:
            fd = os.open(path, os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({path}): {os.strerror(err)}")
            finally:
                os.close(fd)
        return go

    def call(self, host: str, fn: Callable[..., T], *args: Any, timeout: float = 120) -> T:
        """``fn(*args)`` run on a fresh thread inside ``host``; its result or its exception."""
        out: dict[str, Any] = {}

        def body() -> None:
            try:
                self.enter(host)()
                out["value"] = fn(*args)
            except BaseException as err:  # handed back to the caller
                out["error"] = err
        thread = threading.Thread(target=body, daemon=True, name=f"in-{host}")
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"{getattr(fn, '__name__', fn)} in {host} took over {timeout}s")
        if "error" in out:
            raise out["error"]
        return out["value"]  # type: ignore[no-any-return]

    def cleanup(self) -> None:
        """Kill what runs inside, delete every namespace (and so every veth). Never raises."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        for ns in self._made:
            _kill_inside(ns)
            _ip("netns", "del", ns, check=False)
        self._made.clear()
