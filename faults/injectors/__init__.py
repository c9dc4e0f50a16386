"""The fault vocabulary: injectors that wrap the stack's collaborators (one module per
collaborator), fault plans as data (named injectors, parameters, triggers, one seed)
and the injector catalog."""

from kvfault.reference._lazy import lazy_exports

_EXPORTS = {
    "EngineCrash": "kvfault.faults.injectors.engine",
    "EngineRestart": "kvfault.faults.injectors.engine",
    "EvictAfterLookup": "kvfault.faults.injectors.tier",
    "FaultPlan": "kvfault.faults.injectors.plans",
    "FaultSpec": "kvfault.faults.injectors.plans",
    "FenceFailure": "kvfault.faults.injectors.restore_copy",
    "HashOrderShuffle": "kvfault.faults.injectors.ids",
    "INJECTORS": "kvfault.faults.injectors.catalog",
    "Injector": "kvfault.faults.runs",
    "InjectorInfo": "kvfault.faults.injectors.catalog",
    "LateVisibility": "kvfault.faults.injectors.tier",
    "LostCompletion": "kvfault.faults.injectors.completions",
    "LostSaveCompletion": "kvfault.faults.injectors.completions",
    "LateCompletion": "kvfault.faults.injectors.completions",
    "DuplicateCompletion": "kvfault.faults.injectors.completions",
    "LostTierReply": "kvfault.faults.injectors.tier",
    "Param": "kvfault.faults.injectors.params",
    "PARAM_KINDS": "kvfault.faults.injectors.params",
    "ParamKind": "kvfault.faults.injectors.params",
    "PortZeroIds": "kvfault.faults.injectors.ids",
    "RetrieveFailure": "kvfault.faults.injectors.tier",
    "SaltedId": "kvfault.faults.injectors.ids",
    "SlowForward": "kvfault.faults.injectors.engine",
    "Trigger": "kvfault.faults.injectors.base",
    "arm_crashes": "kvfault.faults.injectors.engine",
    "base_tier": "kvfault.faults.injectors.tier",
    "configure_all": "kvfault.faults.injectors.base",
    "draw_params": "kvfault.faults.injectors.plans",
    "fired_report": "kvfault.faults.injectors.plans",
    "salted_ids": "kvfault.faults.injectors.ids",
    "swarm_plan": "kvfault.faults.injectors.plans",
    "wrap_all": "kvfault.faults.injectors.base",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
