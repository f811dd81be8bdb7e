"""``ModelSpec``: one thing carb_nas can build, featurize, profile and predict, with a stable key.

Four kinds: a config of a built-in family (ResNet or another; its key is the config's key),
a user factory ``package.module:function`` with JSON keyword arguments, or an ``nn.Module``
object (Python only), each with the input shape of one batch and a precision.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from carb_nas.errors import ConfigError
from carb_nas.space import Config, validate_knob

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def parse_input_shape(value: str | Sequence[int]) -> tuple[int, ...]:
    """``"1,3,224,224"`` (or a sequence of ints) as a tuple of positive sizes; the first is
    the batch size. ConfigError otherwise."""
    text = value if isinstance(value, str) else ",".join(map(str, value))
    try:  # every part a size: "1,3,x" or "1,,3" is a typo, not the shape (1, 3)
        shape = tuple(int(s) for s in text.replace("x", ",").split(","))
    except ValueError:
        shape = ()
    if len(shape) < 2 or any(s <= 0 for s in shape) or math.prod(shape) > 2**40:
        raise ConfigError(
            f"invalid input shape: expected positive sizes separated by commas, batch first "
            f"(e.g. 1,3,224,224), got {value!r}. Pass the shape of one input batch."
        )
    return shape


def parse_kwargs(text: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """Keyword arguments of a factory: a JSON object (text or mapping). ConfigError otherwise."""
    if text is None:
        return {}
    if isinstance(text, Mapping):
        doc: Any = dict(text)
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(
                f"factory kwargs are not JSON: expected a JSON object such as "
                f"'{{\"width\": 32}}', got {text!r} ({e.msg} at char {e.pos}). Quote the keys "
                "and strings with double quotes."
            ) from None
    if not isinstance(doc, dict):
        raise ConfigError(
            f"invalid factory kwargs: expected a JSON object of keyword arguments, got "
            f"{type(doc).__name__} {doc!r}. Wrap them in {{...}}."
        )
    try:
        json.dumps(doc, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        raise ConfigError(
            f"invalid factory kwargs: expected JSON values (numbers, strings, lists, objects), "
            f"got {doc!r}. Pass plain JSON values."
        ) from None
    return doc


def load_factory(target: str) -> Callable[..., Any]:
    """The callable named by ``package.module:function`` (dots after the colon reach
    attributes). ConfigError when it cannot be imported or is not callable."""
    module_name, sep, attr = str(target).partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"invalid model factory: expected package.module:function, got {target!r}. "
            "Name the module and the function, e.g. mypkg.nets:make_cnn."
        )
    try:
        obj: Any = _import_from_cwd_too(module_name)
    except Exception as e:  # noqa: BLE001 - an import runs arbitrary user code
        raise ConfigError(
            f"cannot import model factory {target!r}: expected an importable module "
            f"{module_name!r}, got {type(e).__name__}: {_one_line(e)}. Check the module path "
            "and PYTHONPATH."
        ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(
                f"cannot find model factory {target!r}: expected module {module_name!r} to "
                f"define {attr!r}, got no attribute {part!r}. Check the function name."
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(
            f"invalid model factory {target!r}: expected a callable returning an nn.Module, "
            f"got {type(obj).__name__}. Point at a function or class."
        )
    return obj


def _import_from_cwd_too(module_name: str) -> Any:
    """Import ``module_name`` as ``python -m`` would: a module in the current directory
    counts. A console script (``carb-nas``) has no current directory on ``sys.path``, so
    ``--model-spec mynet:make_net`` next to ``mynet.py`` failed; like uvicorn, the directory
    is put on the path (kept there: the user's module may import its siblings later)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        top = module_name.split(".")[0]
        cwd = os.getcwd()
        if e.name != top or cwd in sys.path or "" in sys.path:
            raise
        if not (Path(cwd, top + ".py").is_file() or Path(cwd, top).is_dir()):
            raise
        sys.path.insert(0, cwd)
        return importlib.import_module(module_name)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:300] + ("..." if len(text) > 300 else "")


@dataclass(frozen=True, eq=False)
class ModelSpec:
    """A buildable model with a stable ``key``: construct with :meth:`from_config`,
    :meth:`from_factory` or :meth:`from_module`.

    ``input_shape`` is one batch (batch first); ``precision`` one of
    :data:`carb_nas.space.PRECISIONS`. ``build(device)`` returns the eval-mode module in
    that precision (``device="meta"``: without memory).
    """

    kind: str
    input_shape: tuple[int, ...]
    precision: str = "fp32"
    config: Config | None = None
    factory: str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    module: nn.Module | None = None

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_config(cls, config: Config) -> ModelSpec:
        if not isinstance(config, Config):
            raise ConfigError(
                f"invalid config: expected a carb_nas.Config, got {type(config).__name__}. "
                "Build one with Config(family, depth, width, resolution, batch_size)."
            )
        shape = (config.batch_size, 3, config.resolution, config.resolution)
        return cls("config", shape, config.precision, config=config)

    @classmethod
    def from_factory(
        cls,
        factory: str,
        input_shape: str | Sequence[int],
        kwargs: str | Mapping[str, Any] | None = None,
        precision: str = "fp32",
    ) -> ModelSpec:
        """``factory`` (``package.module:function``) called with ``kwargs`` (a JSON object)
        builds the module; it is imported here, so a bad name fails at once."""
        shape = parse_input_shape(input_shape)
        args = parse_kwargs(kwargs)
        load_factory(factory)
        return cls("factory", shape, validate_knob("precision", precision), factory=factory,
                   kwargs=args)  # fmt: skip

    @classmethod
    def from_module(
        cls, module: nn.Module, input_shape: str | Sequence[int], precision: str = "fp32"
    ) -> ModelSpec:
        if not isinstance(module, nn.Module):
            raise ConfigError(
                f"invalid model: expected a torch.nn.Module, got {type(module).__name__}. "
                "Pass the model object (or a factory with --model-spec)."
            )
        shape = parse_input_shape(input_shape)
        return cls("module", shape, validate_knob("precision", precision), module=module)

    # -- queries ------------------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        return int(self.input_shape[0])

    @property
    def name(self) -> str:
        if self.kind == "config":
            c = self.config
            return f"{c.family}-{c.depth} width {c.width:g}"  # type: ignore[union-attr]
        if self.kind == "factory":
            return str(self.factory)
        return type(self.module).__name__

    @property
    def key(self) -> str:
        """16 hex digits, stable across processes: a config's own key; for a factory, its
        name, canonical JSON kwargs, input shape and precision; for a module object, its
        structure (``repr``), parameter and buffer shapes, input shape and precision."""
        if self.kind == "config":
            return self.config.key  # type: ignore[union-attr]
        shape = ",".join(map(str, self.input_shape))
        if self.kind == "factory":
            kwargs = json.dumps(dict(self.kwargs), sort_keys=True, separators=(",", ":"))
            text = f"factory={self.factory};kwargs={kwargs}"
        else:
            m = self.module
            tensors = [(k, tuple(v.shape)) for k, v in m.state_dict().items()]  # type: ignore[union-attr]
            text = f"module={type(m).__qualname__};repr={m!r};tensors={tensors}"
        text += f";input_shape={shape};precision={self.precision}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def build(self, device: str | torch.device = "cpu") -> nn.Module:
        """The eval-mode module in this spec's precision (int8: fp32, quantized later).

        A module object is moved and cast in place (it is the caller's object)."""
        dtype = TORCH_DTYPES.get(self.precision, torch.float32)
        if self.kind == "config":
            from carb_nas.models import build_model

            return build_model(self.config, device)  # type: ignore[arg-type]
        if self.kind == "module":
            return self.module.to(device=device, dtype=dtype).eval()  # type: ignore[union-attr]
        fn = load_factory(str(self.factory))
        try:
            with torch.device(device):
                model = fn(**dict(self.kwargs))
        except Exception as e:  # noqa: BLE001 - user code: report it in one line
            raise ConfigError(
                f"model factory {self.factory!r} failed: expected it to build an nn.Module "
                f"from kwargs {dict(self.kwargs)}, got {type(e).__name__}: {_one_line(e)}. "
                "Fix the factory or its --kwargs."
            ) from None
        if not isinstance(model, nn.Module):
            raise ConfigError(
                f"invalid model factory {self.factory!r}: expected it to return a "
                f"torch.nn.Module, got {type(model).__name__}. Return the model."
            )
        return model.to(device=device, dtype=dtype).eval()

    def example_input(self, device: str | torch.device = "cpu") -> torch.Tensor:
        dtype = TORCH_DTYPES.get(self.precision, torch.float32)
        return torch.randn(self.input_shape, device=device).to(dtype)

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.input_shape))
        return (
            f"ModelSpec({self.kind}: {self.name}, input {shape}, {self.precision}, key {self.key})"
        )
