"""The fault vocabulary: injectors that wrap the stack's collaborators, fault plans as
data (named injectors, parameters, triggers, one seed) and the injector catalog."""

from faults._lazy import lazy_exports

_EXPORTS = {
    "EngineCrash": "faults.injectors.base",
    "EngineRestart": "faults.injectors.base",
    "EvictAfterLookup": "faults.injectors.base",
    "FaultPlan": "faults.injectors.plans",
    "FaultSpec": "faults.injectors.plans",
    "FenceFailure": "faults.injectors.base",
    "HashOrderShuffle": "faults.injectors.base",
    "INJECTORS": "faults.injectors.plans",
    "Injector": "faults.injectors.base",
    "InjectorInfo": "faults.injectors.plans",
    "LateVisibility": "faults.injectors.base",
    "LostCompletion": "faults.injectors.base",
    "LostSaveCompletion": "faults.injectors.base",
    "LateCompletion": "faults.injectors.base",
    "DuplicateCompletion": "faults.injectors.base",
    "LostTierReply": "faults.injectors.base",
    "Param": "faults.injectors.plans",
    "PortZeroIds": "faults.injectors.base",
    "RetrieveFailure": "faults.injectors.base",
    "SaltedId": "faults.injectors.base",
    "SlowForward": "faults.injectors.base",
    "Trigger": "faults.injectors.base",
    "arm_crashes": "faults.injectors.base",
    "base_tier": "faults.injectors.base",
    "configure_all": "faults.injectors.base",
    "draw_params": "faults.injectors.plans",
    "fired_report": "faults.injectors.plans",
    "salted_ids": "faults.injectors.base",
    "swarm_plan": "faults.injectors.plans",
    "wrap_all": "faults.injectors.base",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
