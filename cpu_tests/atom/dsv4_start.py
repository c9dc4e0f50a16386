"""Run as a script by ``test_atom_dsv4_start.py`` (ATOM imported in a process of its
own): starts ATOM's hybrid (DSV4) offload connector, worker and scheduler halves, on the
regions ATOM's own DSV4 builder describes, moves PAGE blocks and a SLOT through ATOM's
codec, and prints what it saw as one JSON line. Usage: ``dsv4_start.py ATOM_SRC DIR``."""

from __future__ import annotations

import json
import os
import sys


def main(atom_src: str, host_dir: str) -> dict:
    sys.path.insert(0, atom_src)
    from kvfault.faults.atom import boundary, dsv4_boundary
    from kvfault.faults.atom.server_config import atom_config, use_lmcache_env
    from kvfault.faults.atom.spec import ServerSpec

    socket_dir = os.path.join(host_dir, "rpc")
    spec = ServerSpec(name="A", block_size=256, chunk_size=256, layout="hybrid")
    use_lmcache_env(spec, host_dir)
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)
    boundary.install_all(socket_dir)
    boundary.set_tp_rank(0, 1)
    dsv4_boundary.install()
    import atom.kv_transfer.offload  # noqa: F401  registers the backend
    import torch
    from atom.kv_transfer.disaggregation.factory import KVConnectorFactory

    from kvfault.faults.atom.dsv4_runner import Dsv4Pools
    from kvfault.faults.atom.dsv4_staging import _host_bytes

    config = atom_config(spec)
    pools = Dsv4Pools(config, num_blocks=24, num_slots=4)
    worker = KVConnectorFactory.create_connector(config, role="worker")
    worker.register_kv_caches({}, pools.transfer, pools.num_blocks)
    impl = getattr(worker, "_impl", worker)
    codec = impl._codec
    regions = list(pools.transfer.block_regions) + list(pools.transfer.swa_block_regions)
    gen = torch.Generator().manual_seed(0)
    for r in regions:  # every byte of ATOM's pools that a region names: distinct noise
        _host_bytes(r.base_addr, r.total_bytes).copy_(
            torch.randint(0, 256, (r.total_bytes,), dtype=torch.uint8, generator=gen)
        )

    def unit(r, i: int) -> bytes:
        return bytes(_host_bytes(r.unit_addr(i), r.unit_bytes).numpy())

    before = {(n, i): unit(r, i) for n, r in enumerate(regions) for i in range(4)}
    buf = torch.zeros(2 * codec.bytes_per_block, dtype=torch.uint8)
    codec.gpu_to_chunk_major_device_buffer(buf, [[3, 5]])
    codec.chunk_major_device_buffer_to_gpu(buf, [[7, 9]])
    page = [
        unit(r, 7) == unit(r, 3) and unit(r, 9) == unit(r, 5) and unit(r, 8) != unit(r, 3)
        for r in pools.transfer.block_regions
    ]
    row = torch.zeros(codec.slot_bytes, dtype=torch.uint8)
    codec.gather_slot(1, row)
    codec.scatter_slot(row, 2)
    slot = [
        unit(r, 2) == before[(len(pools.transfer.block_regions) + n, 1)]
        and unit(r, 3) == before[(len(pools.transfer.block_regions) + n, 3)]
        for n, r in enumerate(pools.transfer.swa_block_regions)
    ]
    scheduler = KVConnectorFactory.create_connector(config, role="scheduler")
    simpl = getattr(scheduler, "_impl", scheduler)
    seen = {
        "worker": type(impl).__name__,
        "scheduler": type(simpl).__name__,
        "codec_device": [str(codec.device), codec.device.type == "cuda"],
        "fused_staging": codec.has_fused_chunk_major_staging,
        "page_regions": [r.semantic_role for r in pools.transfer.block_regions],
        "slot_regions": [r.semantic_role for r in pools.transfer.swa_block_regions],
        "num_blocks": pools.num_blocks,
        "num_slots": pools.num_slots,
        "bytes_per_block": codec.bytes_per_block,
        "page_moved": page,
        "slot_moved": slot,
        "lookup_client": simpl._lookup_client is not None,
        "lookup_server": impl._lookup_server is not None,
    }
    for obj in (impl._lookup_server, impl._engine):
        close = getattr(obj, "close", None)
        if close is not None:
            close()
    return seen


if __name__ == "__main__":
    print("DSV4 " + json.dumps(main(sys.argv[1], sys.argv[2])), flush=True)
    os._exit(0)  # lmcache's background threads: the result is out
