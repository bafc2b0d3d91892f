"""Ray for esper's workers: connected to the cluster at an address, or a local one started here that only this
machine can reach.

Ray's processes (GCS server, raylet, every worker) serve gRPC on the address of their node, and Ray does not
authenticate callers by default: whoever reaches those ports can run code on the cluster. So the local cluster gets
127.0.0.1 as its node address, and every server it starts binds to loopback. Ray on Linux replaces a loopback node
address with the machine's routable one unless its multi-node support is switched off (the constant behind its
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER variable, read when Ray is imported), so the local start switches it off for the
duration of `ray.init` and checks the address the node got. A cluster at an address is the user's: it listens where
it was started (`ray start --node-ip-address ...`).
"""

from __future__ import annotations

import os
from types import ModuleType

import torch

from esper.leyline.errors import UserInputError

__all__ = ["LOOPBACK", "ensure_ray", "import_ray"]

LOOPBACK = "127.0.0.1"


def import_ray() -> ModuleType:
    """Ray; its absence is the user's to fix (install the extra, or choose worker processes)."""
    try:
        import ray
    except ImportError as error:
        raise UserInputError("Ray workers need the optional [dist] extra: pip install 'esper[dist]' (or run without "
                             "--executor ray)") from error
    return ray


def ensure_ray(address: str | None, num_cpus: int | None = None) -> tuple[ModuleType, bool]:
    """Ray, connected to the cluster at `address` or to a local cluster started here on loopback (never Ray's local
    mode); True when this call started it (the caller then shuts it down)."""
    ray = import_ray()
    if ray.is_initialized():
        return ray, False
    if address is not None:
        ray.init(address=address)
        return ray, True
    _init_on_loopback(ray, num_cpus=num_cpus if num_cpus is not None else os.cpu_count() or 1,
                      num_gpus=torch.cuda.device_count())
    return ray, True


def _init_on_loopback(ray: ModuleType, *, num_cpus: int, num_gpus: int) -> None:
    """A local cluster whose node address, and so every server's, is 127.0.0.1; refused if Ray chose another."""
    from ray._private import ray_constants

    multi_node = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, _node_ip_address=LOOPBACK)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = multi_node
    node = ray.util.get_node_ip_address()
    if node != LOOPBACK:
        ray.shutdown()
        raise UserInputError(f"Ray {ray.__version__} started its local cluster on {node}, reachable from the network, "
                           f"instead of {LOOPBACK}: start a cluster yourself (ray start --head --node-ip-address "
                           f"{LOOPBACK}) and pass --ray-address, or use --executor process")
