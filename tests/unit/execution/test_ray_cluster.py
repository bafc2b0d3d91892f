"""The local Ray cluster esper starts (`--executor ray` without `--ray-address`) listens on loopback only: Ray does
not authenticate callers by default, so a port on another interface would let the network run code here."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from esper.execution.ray_cluster import LOOPBACK, ensure_ray

LOOPBACK_ADDRESSES = {LOOPBACK, f"::ffff:{LOOPBACK}"}  # a dual-stack socket bound to 127.0.0.1 shows the mapped form


@pytest.fixture
def local_cluster() -> Iterator[Any]:
    pytest.importorskip("ray")
    ray, started = ensure_ray(None, num_cpus=1)
    assert started
    try:
        yield ray
    finally:
        ray.shutdown()


def test_every_listener_of_the_local_cluster_is_on_loopback(local_cluster: Any) -> None:
    import psutil  # Ray ships it (and puts it on the path when imported)

    @local_cluster.remote
    class Probe:
        def pid(self) -> int:
            return os.getpid()

    probe = Probe.remote()  # an actor: a worker process with its own server, alive while this handle is
    worker = local_cluster.get(probe.pid.remote())
    assert local_cluster.util.get_node_ip_address() == LOOPBACK

    def cluster_listeners() -> dict[str, set[str]]:
        """Listening addresses of this process and its descendants (gcs_server, raylet, agents, workers)."""
        found: dict[str, set[str]] = {}
        for process in [psutil.Process(), *psutil.Process().children(recursive=True)]:
            try:
                sockets = process.net_connections(kind="tcp")
                name = process.name()
            except psutil.NoSuchProcess:
                continue
            for s in sockets:
                if s.status == psutil.CONN_LISTEN:
                    found.setdefault(f"{name} ({process.pid})", set()).add(s.laddr.ip)
        return found

    deadline = time.monotonic() + 30  # on a loaded machine a server may come up after the first call returns
    listeners = cluster_listeners()
    while not any(p.endswith(f"({worker})") for p in listeners) and time.monotonic() < deadline:
        time.sleep(0.5)
        listeners = cluster_listeners()
    assert any("gcs_server" in p for p in listeners) and any("raylet" in p for p in listeners)
    assert any(p.endswith(f"({worker})") for p in listeners), listeners
    exposed = {p: ips - LOOPBACK_ADDRESSES for p, ips in listeners.items() if ips - LOOPBACK_ADDRESSES}
    assert not exposed, f"listening beyond loopback: {exposed}"
    del probe
