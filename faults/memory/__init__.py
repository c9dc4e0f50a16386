"""The ``memory`` tier: the reference stack on the in-process tier (``fakes``) in
virtual time. A plugin like any other (entry point ``kvfault.tiers: memory``): its
declaration (``tier.py``) and its executor (``executor.py``) live here, and the
campaign core imports neither."""
