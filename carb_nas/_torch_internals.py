"""Every torch private API carb_nas uses, in one place.

Private APIs change without notice between torch releases; each use sits behind one small
function here, and ``tests/test_torch_internals.py`` names exactly which one broke after an
upgrade. Other modules import from here, never from ``torch._*`` or ``torch.utils._*``.
torch is imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "dispatch_mode_base",
    "op_name",
    "flop_formulas",
    "overload_packet",
    "torch_function_disabled",
    "global_forward_hooks",
]


# -- carb_nas.features trace -----------------------------------------------------------------
def dispatch_mode_base() -> type:
    """``torch.utils._python_dispatch.TorchDispatchMode``: the base class of a mode whose
    ``__torch_dispatch__(func, types, args, kwargs)`` sees every aten op of a forward pass
    (the meta-device tracer of :mod:`carb_nas.features` subclasses it)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


def op_name(func: Any) -> str:
    """The bare aten name of an op overload seen by a dispatch mode (``aten::add.Tensor``
    -> ``"add"``), from its private ``_schema``."""
    return func._schema.name.split("::")[-1]


def overload_packet(func: Any) -> Any:
    """The overload packet of an op overload (``aten.mm.default`` -> ``aten.mm``): the key of
    :func:`flop_formulas`, from its private ``_overloadpacket``."""
    return func._overloadpacket


def flop_formulas() -> dict[Any, Any]:
    """``torch.utils.flop_counter.flop_registry``: overload packet -> ``f(*args, out_val=out,
    **kwargs)`` giving the FLOPs ``FlopCounterMode`` counts for that op (not in the module's
    ``__all__``). The tracer counts with it directly: ``FlopCounterMode`` itself tracks
    modules with global hooks and costs about half of a meta-device trace."""
    from torch.utils.flop_counter import flop_registry

    return flop_registry


def torch_function_disabled() -> Any:
    """``torch._C.DisableTorchFunction``: the context manager (class) under which no
    ``__torch_function__`` runs, modes included. The tracer's layer cache reads a tensor's
    metadata and rebuilds a cached layer's output under it, where each read would otherwise
    be one Python call into the per-operator recorder's ``TorchFunctionMode``."""
    import torch

    return torch._C.DisableTorchFunction


def global_forward_hooks() -> bool:
    """Whether module forward (pre-)hooks are registered for every module
    (``torch.nn.modules.register_module_forward_hook``; the registries are private:
    ``torch.nn.modules.module._global_forward_hooks`` and ``_global_forward_pre_hooks``).
    Such hooks run around each submodule's call, so the tracer then replays no block of
    submodules as a whole (their hooks would be skipped)."""
    from torch.nn.modules import module

    return bool(module._global_forward_hooks or module._global_forward_pre_hooks)


# -- measure: the CPU profiler's raw allocation events (carb_nas.measure._runtimes) ----------
# ``torch_cpu_peak_bytes`` needs every CPU allocation and free of a forward pass in time order.
# The public ``prof.events()`` / ``key_averages()`` views fold allocations into ops, so the raw
# event tree of the kineto results is read; the tree, its event fields and the event-type enum
# are all private. ``tests/test_torch_internals_measure.py`` checks each piece by name.

__all__ += ["cpu_allocation_events"]


def _event_tree(prof: object) -> list:
    """Root events of a finished ``torch.profiler.profile``: private
    ``prof.profiler.kineto_results.experimental_event_tree()``."""
    return prof.profiler.kineto_results.experimental_event_tree()  # type: ignore[attr-defined]


def _allocation_tag() -> object:
    """The tag of allocation events: private ``torch._C._profiler._EventType.Allocation``."""
    from torch._C._profiler import _EventType

    return _EventType.Allocation


def cpu_allocation_events(prof: object) -> list[tuple[int, int]]:
    """``(start_time_ns, bytes)`` of every CPU allocation (bytes > 0) and free (bytes < 0)
    recorded by a finished ``torch.profiler.profile(profile_memory=True)``, depth-first in
    recorded order.

    Raises ImportError or AttributeError when torch no longer has one of the private pieces
    (the tree, ``_EventType.Allocation``, an event's ``tag`` / ``start_time_ns`` /
    ``children`` / ``extra_fields.device.type`` / ``extra_fields.alloc_size``).
    """
    tag = _allocation_tag()
    out: list[tuple[int, int]] = []
    stack = list(reversed(_event_tree(prof)))
    while stack:
        ev = stack.pop()
        if ev.tag == tag and ev.extra_fields.device.type == "cpu":
            out.append((int(ev.start_time_ns), int(ev.extra_fields.alloc_size)))
        stack.extend(reversed(ev.children))
    return out
