"""Every torch private API carb_nas uses, in one place.

Private APIs change without notice between torch releases; each use sits behind one small
function here, and ``tests/test_torch_internals.py`` names exactly which one broke after an
upgrade. Other modules import from here, never from ``torch._*`` or ``torch.utils._*``.
"""

from __future__ import annotations

__all__: list[str] = []
