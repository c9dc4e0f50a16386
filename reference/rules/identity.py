"""Engine identity: the id that names a server's lookup socket (fix 2 of the seed)."""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_PREFIX = "kvfault-offload"


@dataclass(frozen=True)
class EngineIdentity:
    """``<prefix>-r{port}-dp{rank}`` when the data-parallel base port is resolved (> 0),
    else ``<prefix>-dp{rank}``. Two servers on one host with resolved ports never share
    a lookup socket."""

    prefix: str = DEFAULT_PREFIX
    # Startup refuses a path a live server already serves (never a silent share).
    refuse_live_path: bool = True

    def engine_id(self, data_parallel_base_port: int, dp_rank: int) -> str:
        port = int(data_parallel_base_port or 0)
        if port > 0:
            return f"{self.prefix}-r{port}-dp{dp_rank}"
        return f"{self.prefix}-dp{dp_rank}"


def lookup_socket_path(rpc_dir: str, engine_id: str, tp_rank: int = 0) -> str:
    """The host-wide path of an engine's lookup socket."""
    return os.path.join(rpc_dir, f"engine_{engine_id}_service_lookup_rpc_port_{tp_rank}")
