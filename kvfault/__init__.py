"""kvfault: fault-injection testing of KV-cache offload, and the reference offload stack
it tests. Its one top-level name holds three packages:

- ``kvfault.reference``: the reference offload stack (scheduler, worker, rules, traces);
- ``kvfault.fakes``: the simulator the stack runs on without a GPU (clock, copy engine,
  memory tier, model);
- ``kvfault.faults``: the fault injectors, properties, scenarios, campaign, tiers and the
  ``kvfault`` command.

Nothing is imported here: ``import kvfault`` costs nothing, and each package is imported
by its own name.
"""
