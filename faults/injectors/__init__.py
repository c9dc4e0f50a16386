"""The fault vocabulary: injectors that wrap the stack's collaborators (one module per
collaborator), fault plans as data (named injectors, parameters, triggers, one seed)
and the injector catalog."""

from reference._lazy import lazy_exports

_EXPORTS = {
    "EngineCrash": "faults.injectors.engine",
    "EngineRestart": "faults.injectors.engine",
    "EvictAfterLookup": "faults.injectors.tier",
    "FaultPlan": "faults.injectors.plans",
    "FaultSpec": "faults.injectors.plans",
    "FenceFailure": "faults.injectors.restore_copy",
    "HashOrderShuffle": "faults.injectors.ids",
    "INJECTORS": "faults.injectors.catalog",
    "Injector": "faults.injectors.base",
    "InjectorInfo": "faults.injectors.catalog",
    "LateVisibility": "faults.injectors.tier",
    "LostCompletion": "faults.injectors.completions",
    "LostSaveCompletion": "faults.injectors.completions",
    "LateCompletion": "faults.injectors.completions",
    "DuplicateCompletion": "faults.injectors.completions",
    "LostTierReply": "faults.injectors.tier",
    "Param": "faults.injectors.params",
    "PARAM_KINDS": "faults.injectors.params",
    "ParamKind": "faults.injectors.params",
    "PortZeroIds": "faults.injectors.ids",
    "RetrieveFailure": "faults.injectors.tier",
    "SaltedId": "faults.injectors.ids",
    "SlowForward": "faults.injectors.engine",
    "Trigger": "faults.injectors.base",
    "arm_crashes": "faults.injectors.engine",
    "base_tier": "faults.injectors.tier",
    "configure_all": "faults.injectors.base",
    "draw_params": "faults.injectors.plans",
    "fired_report": "faults.injectors.plans",
    "salted_ids": "faults.injectors.ids",
    "swarm_plan": "faults.injectors.plans",
    "wrap_all": "faults.injectors.base",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
