"""The ``atom`` tier: kvfault's faults and properties against ATOM's real scheduler and
LMCache offload connector, on a CPU, with a real lmcache engine (docs/atom/tier.md).

ATOM is never imported in the campaign process: ``kvfault.faults.atom.zygote`` starts the
server processes, which put the checkout (``--atom-src`` / ``KVFAULT_ATOM_SRC``) first on
``sys.path``. Importing this package imports nothing of ATOM, lmcache or torch.
"""
