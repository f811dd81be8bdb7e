"""Each torch private API carb_nas uses (carb_nas._torch_internals), with the message that
names what broke when a torch upgrade removes or changes it."""

from __future__ import annotations

import pytest
import torch

from carb_nas import _torch_internals as internals

TORCH = torch.__version__


# -- carb_nas.features trace -----------------------------------------------------------------
def test_torch_dispatch_mode_sees_every_aten_op() -> None:
    try:
        base = internals.dispatch_mode_base()
    except (ImportError, AttributeError) as e:
        pytest.fail(
            f"torch {TORCH} removed torch.utils._python_dispatch.TorchDispatchMode ({e}): "
            "carb_nas.features trace needs it (carb_nas._torch_internals.dispatch_mode_base)"
        )
    seen: list[tuple[str, int]] = []

    class Recorder(base):  # type: ignore[misc, valid-type]
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            seen.append((internals.op_name(func), len(args)))
            return func(*args, **(kwargs or {}))

    x = torch.empty((2, 3), device="meta")
    with Recorder():
        y = torch.relu(x + x)
    assert y.shape == (2, 3) and y.device.type == "meta"
    names = [name for name, _ in seen]
    assert "add" in names and "relu" in names, (
        f"torch {TORCH} changed TorchDispatchMode.__torch_dispatch__ (saw {seen}): "
        "carb_nas.features trace needs every aten op of a forward pass with its args"
    )


def test_op_schema_gives_the_aten_name() -> None:
    op = torch.ops.aten.convolution.default
    try:
        name = internals.op_name(op)
    except AttributeError as e:
        pytest.fail(
            f"torch {TORCH} removed OpOverload._schema ({e}): carb_nas.features trace needs "
            "it to name ops (carb_nas._torch_internals.op_name)"
        )
    assert name == "convolution", (
        f"torch {TORCH} changed OpOverload._schema.name (got {name!r} from "
        f"{op._schema.name!r}, expected 'aten::convolution'): carb_nas.features trace needs it"
    )
    assert internals.op_name(torch.ops.aten.add_.Tensor) == "add_"


def test_flop_formulas_count_like_flop_counter_mode() -> None:
    try:
        formulas = internals.flop_formulas()
        packet = internals.overload_packet(torch.ops.aten.mm.default)
    except (ImportError, AttributeError) as e:
        pytest.fail(
            f"torch {TORCH} removed torch.utils.flop_counter.flop_registry or "
            f"OpOverload._overloadpacket ({e}): the carb_nas.features trace counts FLOPs with "
            "them (carb_nas._torch_internals.flop_formulas / overload_packet)"
        )
    a, b = torch.empty((4, 8), device="meta"), torch.empty((8, 3), device="meta")
    assert packet in formulas, (
        f"torch {TORCH} changed flop_registry's keys (aten.mm missing): carb_nas.features "
        "trace needs overload packets as keys"
    )
    assert formulas[packet](a, b, out_val=torch.empty((4, 3), device="meta")) == 2 * 4 * 8 * 3


def test_torch_function_can_be_disabled_modes_included() -> None:
    from torch.overrides import TorchFunctionMode

    try:
        disabled = internals.torch_function_disabled()
    except AttributeError as e:
        pytest.fail(
            f"torch {TORCH} removed torch._C.DisableTorchFunction ({e}): the carb_nas.features "
            "trace's layer cache needs it (carb_nas._torch_internals.torch_function_disabled)"
        )
    seen: list[str] = []

    class Recorder(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            seen.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    x = torch.empty((2, 3), device="meta")
    with Recorder():
        with disabled():
            y = torch.empty_strided((2, 3), x.stride(), device="meta")
            assert tuple(x.shape) == (2, 3)
        torch.relu(y)
    assert seen == ["relu"], (
        f"torch {TORCH} changed torch._C.DisableTorchFunction (a mode saw {seen} under it, "
        "expected only the relu after it): the carb_nas.features trace's layer cache needs "
        "it to switch TorchFunctionModes off too"
    )


def test_global_module_hooks_are_seen() -> None:
    from torch import nn

    try:
        assert internals.global_forward_hooks() is False
    except AttributeError as e:
        pytest.fail(
            f"torch {TORCH} moved torch.nn.modules.module._global_forward_hooks ({e}): the "
            "carb_nas.features trace's block cache needs it "
            "(carb_nas._torch_internals.global_forward_hooks)"
        )
    handle = nn.modules.module.register_module_forward_hook(lambda m, i, o: None)
    try:
        assert internals.global_forward_hooks() is True, (
            f"torch {TORCH} keeps global forward hooks elsewhere: the carb_nas.features "
            "trace's block cache would skip them (carb_nas._torch_internals.global_forward_hooks)"
        )
    finally:
        handle.remove()
    assert internals.global_forward_hooks() is False
