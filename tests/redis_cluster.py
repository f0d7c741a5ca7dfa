"""A private three-primary Redis Cluster for tests: redis-server processes on free ports,
``cluster-enabled yes``, slots assigned by ``redis-cli --cluster create`` (or, without
redis-cli, by CLUSTER ADDSLOTSRANGE + CLUSTER MEET from Python)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import redis

from tests.redis_server import RedisServer, free_port

SLOTS = 16384


def _bus_safe_port() -> int:
    """A free port whose cluster bus port (+10000) is a valid, free port too."""
    while True:
        port = free_port()
        if port + 10000 <= 65535:
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + 10000))
                return port
            except OSError:
                pass


class ClusterServers:
    """Three cluster-enabled redis-servers that serve every slot between them."""

    def __init__(self, size: int = 3, aof: bool = True) -> None:
        self.aof = aof
        self.nodes = [self._server() for _ in range(size)]
        self.replicas: list[RedisServer] = []

    def _server(self) -> RedisServer:
        return RedisServer(pick_port=_bus_safe_port, aof=self.aof, extra=[
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "5000"])

    def add_replica(self, primary: RedisServer, timeout: float = 20.0) -> RedisServer:
        """A replica of ``primary``, started, joined and in sync."""
        replica = self._server().start()
        self.replicas.append(replica)
        client = redis.Redis(port=replica.port, decode_responses=True)
        client.execute_command("CLUSTER MEET", "127.0.0.1", primary.port)
        primary_id = redis.Redis(port=primary.port, decode_responses=True).execute_command(
            "CLUSTER MYID")
        deadline = time.monotonic() + timeout
        while True:
            try:
                client.execute_command("CLUSTER REPLICATE", primary_id)
                break
            except redis.ResponseError:  # the MEET has not reached it yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        while client.info("replication").get("master_link_status") != "up":
            if time.monotonic() > deadline:
                raise RuntimeError("the test replica did not sync")
            time.sleep(0.05)
        self.wait_ok()
        return replica

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> ClusterServers:
        """Start the nodes and join them; on any failure the nodes already started stop."""
        try:
            for node in self.nodes:
                node.start()
            cli = shutil.which("redis-cli")
            if cli:
                subprocess.run([cli, "--cluster", "create",
                                *(f"127.0.0.1:{n.port}" for n in self.nodes),
                                "--cluster-replicas", "0", "--cluster-yes"],
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            else:
                self._assign_slots()
            self.wait_ok()
        except BaseException:
            self.cleanup()
            raise
        return self

    def _assign_slots(self) -> None:
        step = SLOTS // len(self.nodes)
        first = redis.Redis(port=self.nodes[0].port)
        for i, node in enumerate(self.nodes):
            high = SLOTS - 1 if i == len(self.nodes) - 1 else (i + 1) * step - 1
            redis.Redis(port=node.port).execute_command("CLUSTER ADDSLOTSRANGE", i * step, high)
            if i:
                first.execute_command("CLUSTER MEET", "127.0.0.1", node.port)

    def wait_ok(self, timeout: float = 20.0) -> None:
        """Until every node says cluster_state:ok and knows every node."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                infos = [redis.Redis(port=n.port).cluster("info") for n in self.nodes]
                known = len(self.nodes) + len(self.replicas)
                if all(i["cluster_state"] == "ok" and int(i["cluster_known_nodes"]) == known
                       for i in infos):
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise RuntimeError("the test Redis Cluster did not reach cluster_state:ok")

    def cleanup(self) -> None:
        for node in self.nodes + self.replicas:
            node.cleanup()
