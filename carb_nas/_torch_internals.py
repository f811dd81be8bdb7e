"""Every torch private API carb_nas uses, in one place.

Private APIs change without notice between torch releases; each use sits behind one small
function here, and ``tests/test_torch_internals.py`` names exactly which one broke after an
upgrade. Other modules import from here, never from ``torch._*`` or ``torch.utils._*``.
torch is imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["dispatch_mode_base", "op_name"]


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
