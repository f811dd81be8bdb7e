"""Search spaces: declarative TOML files of knobs, and the frozen ``Config`` value.

A space file looks like::

    name = "resnet"
    carb_ranges = true          # values must lie inside CARB's ranges (checked on load)
    [knobs]
    family = ["basic", "bottleneck"]
    width = {start = 0.25, stop = 4.0, step = 0.25}     # inclusive stepped range
    resolution = [32, 64, 96, 128]
    batch_size = {start = 1, stop = 256, factor = 2}    # inclusive geometric range
    precision = ["fp32", "fp16"]
    [family.basic]
    depth = [10, 18, 34]
    [family.bottleneck]
    depth = [50, 101]

Any knob may be given globally under ``[knobs]`` or per family under ``[family.<name>]``
(per-family wins). ``runtime`` is optional (default ``torch``).
"""

from __future__ import annotations

import hashlib
import math
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb_nas.errors import ConfigError, InputFileError, MissingFileError, SpaceError

__all__ = [
    "Config",
    "Space",
    "load_space",
    "FAMILIES",
    "RESNET_FAMILIES",
    "ZOO_FAMILIES",
    "family_group",
    "stage_layout",
    "REGNET_PARAMS",
    "regnet_block_widths",
    "PRECISIONS",
    "CONFIG_COLUMNS",
    "ARCH_COLUMNS",
    "REQUIRED_COLUMNS",
    "NUMERIC_KNOBS",
    "KNOB_RANGES",
    "canonical_width",
    "validate_knob",
    "factorize_configs",
    "normalize_config_frame",
    "configs_to_frame",
    "frame_to_configs",
    "register_limit",
    "bundled_space_path",
]

RESNET_FAMILIES = ("basic", "bottleneck")
# The built-in families beyond ResNet and their standard depth (see "built-in families" below).
ZOO_FAMILIES: dict[str, int] = {
    "resnext32x4d": 50,
    "resnext32x8d": 101,
    "resnext64x4d": 101,
    "vgg": 16,
    "vgg_bn": 16,
    "densenet": 121,
    "mobilenet_v2": 17,
    "mobilenet_v3_large": 15,
    "mobilenet_v3_small": 11,
    "efficientnet": 16,
    "regnet_x_400mf": 22,
    "regnet_x_800mf": 16,
    "regnet_x_1_6gf": 18,
    "regnet_x_3_2gf": 25,
    "regnet_y_400mf": 16,
    "regnet_y_800mf": 14,
    "regnet_y_1_6gf": 27,
    "regnet_y_3_2gf": 21,
}
FAMILIES = RESNET_FAMILIES + tuple(ZOO_FAMILIES)
PRECISIONS = ("fp32", "fp16", "bf16", "int8", "int8-dynamic")  # int8: static; see measure
_RUNTIMES = ("torch", "onnxruntime", "openvino", "litert")
# The columns of a configs table, in order; a space file's knobs have the same names.
CONFIG_COLUMNS = ("family", "depth", "width", "resolution", "batch_size", "precision", "runtime")
ARCH_COLUMNS = CONFIG_COLUMNS[:4]  # what fixes the network: family, depth, width, resolution
REQUIRED_COLUMNS = CONFIG_COLUMNS[:5]  # a configs table may leave out precision and runtime
_CONFIG_DEFAULTS = {"precision": "fp32", "runtime": "torch"}
NUMERIC_KNOBS: dict[str, type] = {
    "depth": int,
    "width": float,
    "resolution": int,
    "batch_size": int,
}
_LIMITS = ("max_gflops_per_batch",)

# Allowed values of the numeric knobs, inclusive (width's minimum is the smallest width of
# 4 decimals, the precision of config keys). The maxima keep
# every per-batch count of the features (flops, bytes) inside int64 and a features run short:
# depth up to ResNet-1202, the deepest of He et al. (2016).
_MAX_DEPTH = 1202
KNOB_RANGES: dict[str, tuple[float, float]] = {
    "depth": (4, _MAX_DEPTH),
    "width": (0.0001, 16.0),
    "resolution": (32, 1024),
    "batch_size": (1, 4096),
}
_UNITS = {"depth": " layers", "width": "", "resolution": " pixels", "batch_size": ""}
_MAX_KNOB_VALUES = 100_000  # values one range table may expand to (checked before expanding)
_MAX_GRID_CONFIGS = 10_000_000  # configs a grid may enumerate (checked before enumerating)

# Ranges of the CARB paper (docs/concepts.md); a space with `carb_ranges = true` must stay
# inside them.
_CARB_RANGES: dict[str, tuple[float, float]] = {
    "depth.basic": (8, 152),
    "depth.bottleneck": (50, 200),
    "width": (0.1, 4.0),
    "resolution": (32, 128),
    "batch_size": (1, 256),
}

# Blocks per stage of the standard ResNets (He et al. 2016; torchvision; ResNet-200 from
# He et al. 2016b). Other depths follow the rule in `stage_layout`.
_STANDARD_LAYOUTS = {
    ("basic", 18): (2, 2, 2, 2),
    ("basic", 34): (3, 4, 6, 3),
    ("bottleneck", 50): (3, 4, 6, 3),
    ("bottleneck", 101): (3, 4, 23, 3),
    ("bottleneck", 152): (3, 8, 36, 3),
    ("bottleneck", 200): (3, 24, 36, 3),
}
_LAYERS_PER_BLOCK = {"basic": 2, "bottleneck": 3}
_STAGE_WEIGHTS = (3, 4, 6, 3)  # the ResNet-34/50 proportions


def stage_layout(family: str, depth: int) -> tuple[int, ...]:
    """Blocks per stage for a family and depth.

    Depth counts weighted layers as in the ResNet paper: stem conv + fc + the convs of every
    block (2 per basic block, 3 per bottleneck), so ``blocks = (depth - 2) / layers_per_block``
    must be a whole number. Standard depths use their published layouts. Any other depth
    spreads its blocks over four stages in the 3:4:6:3 proportions by largest remainder
    (every stage at least one block, ties to the earlier stage); with fewer than four blocks
    the network has that many stages of one block each (basic depth 8 → 3 stages). Depths
    above ResNet-1202's are refused.

    For the other built-in families (:data:`ZOO_FAMILIES`) see :func:`_zoo_layout`.
    """
    if family in ZOO_FAMILIES:
        return _zoo_layout(family, depth)
    if family not in _LAYERS_PER_BLOCK:
        raise ConfigError(
            f"unknown family: expected one of {list(FAMILIES)}, got {family!r}. "
            "Use 'basic', 'bottleneck' or a built-in family (docs/spaces.md)."
        )
    if (family, depth) in _STANDARD_LAYOUTS:
        return _STANDARD_LAYOUTS[(family, depth)]
    if depth > _MAX_DEPTH:  # a deeper net would take minutes to featurize
        raise ConfigError(
            f"invalid depth for the {family} family: expected depth <= {_MAX_DEPTH} "
            f"(the deepest ResNet published), got {depth!r}. Pick a smaller depth."
        )
    per = _LAYERS_PER_BLOCK[family]
    blocks, rest = divmod(depth - 2, per)
    if rest or blocks < 1:
        valid = [d for d in range(2 + per, 2 + per * 8, per)]
        raise ConfigError(
            f"invalid depth for the {family} family: expected depth = 2 + {per} x blocks "
            f"(e.g. {valid}...), got {depth}. Pick a depth of that form."
        )
    if blocks < 4:
        return (1,) * blocks
    spare = blocks - 4
    total = sum(_STAGE_WEIGHTS)
    raw = [spare * w / total for w in _STAGE_WEIGHTS]
    extra = [math.floor(r) for r in raw]
    order = sorted(range(4), key=lambda i: (-(raw[i] - extra[i]), i))
    for i in order[: spare - sum(extra)]:
        extra[i] += 1
    return tuple(1 + e for e in extra)


def canonical_width(width: float) -> str:
    """The text form of a width in config keys (4 decimals, trailing zeros dropped)."""
    # 4 decimals is far finer than any grid; `g` drops trailing zeros so 1.0 -> "1".
    return format(round(float(width), 4), "g")


@dataclass(frozen=True, order=True)
class Config:
    """One point of a space. ``key`` is stable across processes and releases."""

    family: str
    depth: int
    width: float
    resolution: int
    batch_size: int
    precision: str = "fp32"
    runtime: str = "torch"

    def __post_init__(self) -> None:
        for knob in CONFIG_COLUMNS:
            object.__setattr__(self, knob, validate_knob(knob, getattr(self, knob)))
        object.__setattr__(self, "width", float(canonical_width(self.width)))
        stage_layout(self.family, self.depth)

    @property
    def key(self) -> str:
        """16 hex digits of SHA-256 over a canonical text form of every field."""
        text = (
            f"family={self.family};depth={self.depth};width={canonical_width(self.width)};"
            f"resolution={self.resolution};batch_size={self.batch_size};"
            f"precision={self.precision};runtime={self.runtime}"
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def layout(self) -> tuple[int, ...]:
        return stage_layout(self.family, self.depth)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def replace(self, **changes: Any) -> Config:
        return Config(**{**self.as_dict(), **changes})


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds (so messages show 18.5, not np.float64)."""
    return value.item() if isinstance(value, np.generic) else value


def _choices(knob: str) -> tuple[str, ...]:
    return {"family": FAMILIES, "precision": PRECISIONS, "runtime": _RUNTIMES}[knob]


def validate_knob(knob: str, value: Any) -> Any:
    """One knob's value, typed (int depth/resolution/batch_size, float width, str names).

    The one rule set for every config value, wherever it comes from (a ``Config``, a space file, a
    configs table): names from :data:`FAMILIES`, :data:`PRECISIONS` and the runtimes (torch,
    onnxruntime, openvino, litert); numbers finite, whole where the knob counts something, and
    inside :data:`KNOB_RANGES`. Numeric text (``"64"``) counts as its number. Raises
    :class:`~carb_nas.errors.ConfigError` naming the knob, the allowed values and the value.
    Whether a depth suits its family is :func:`stage_layout`'s rule.
    """
    value = _plain(value)
    if knob not in NUMERIC_KNOBS:
        choices = _choices(knob)
        if value not in choices:
            what = "unknown family" if knob == "family" else f"unsupported {knob}"
            raise ConfigError(
                f"{what}: expected one of {list(choices)}, got {value!r}. Use one of those names."
            )
        return str(value)
    kind = NUMERIC_KNOBS[knob]
    lo, hi = KNOB_RANGES[knob]
    unit = _UNITS[knob]
    spec = f"a {'whole ' if kind is int else ''}number from {lo:g} to {hi:g}{unit}"
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise ConfigError(
            f"non-numeric {knob}: expected {spec}, got {value!r}. Give {knob} a number."
        )
    if not math.isfinite(number):
        raise ConfigError(f"invalid {knob}: expected {spec}, got {value!r}. Give {knob} a number.")
    if kind is int and number != int(number):
        raise ConfigError(
            f"non-integer {knob}: expected {spec}, got {value!r}. Use a whole number."
        )
    if not lo <= number <= hi:
        raise ConfigError(
            f"invalid {knob}: expected {spec}, got {value!r}. Use a value in that range."
        )
    return kind(number)


def _expand(knob: str, spec: Any, where: str) -> list:
    """Turn a list or a range table into a list of values."""
    if isinstance(spec, list):
        values = spec
    elif isinstance(spec, dict):
        unknown = set(spec) - {"start", "stop", "step", "factor"}
        if unknown or not {"start", "stop"} <= set(spec) or ("step" in spec) == ("factor" in spec):
            raise SpaceError(
                f"{where}: bad range for knob '{knob}': expected a table with start, stop and "
                f"exactly one of step (arithmetic) or factor (geometric), got {spec!r}. "
                "Write e.g. {start = 1, stop = 256, factor = 2}."
            )
        start, stop = spec["start"], spec["stop"]
        if not all(isinstance(v, (int, float)) for v in spec.values()):
            raise SpaceError(
                f"{where}: bad range for knob '{knob}': expected numbers, got {spec!r}. "
                "Use numeric start/stop/step."
            )
        if stop < start:
            raise SpaceError(
                f"{where}: inverted range for knob '{knob}': expected start <= stop, got "
                f"start={start}, stop={stop}. Swap them."
            )
        for bound in (start, stop):  # cheap, before any values are made
            if knob in NUMERIC_KNOBS:
                try:
                    validate_knob(knob, bound)
                except ConfigError as e:
                    raise SpaceError(f"{where}: range of knob '{knob}': {e}") from None
        values = []
        if "step" in spec:
            step = spec["step"]
            if step <= 0:
                raise SpaceError(
                    f"{where}: bad step for knob '{knob}': expected step > 0, got {step}. "
                    "Use a positive step."
                )
            n = int(math.floor((stop - start) / step + 1e-9)) + 1
            if n > _MAX_KNOB_VALUES:
                raise SpaceError(
                    f"{where}: range of knob '{knob}' too long: expected at most "
                    f"{_MAX_KNOB_VALUES:,} values, got {n:,} (start={start}, stop={stop}, "
                    f"step={step}). Use a larger step."
                )
            values = [start + i * step for i in range(n)]
            if all(isinstance(v, int) for v in (start, step)):
                values = [int(v) for v in values]
            else:
                values = [round(v, 6) for v in values]
        else:
            factor = spec["factor"]
            if factor <= 1:
                raise SpaceError(
                    f"{where}: bad factor for knob '{knob}': expected factor > 1, got {factor}. "
                    "Use e.g. factor = 2."
                )
            v = start
            while v <= stop * (1 + 1e-9):
                values.append(v)
                v = v * factor
            if isinstance(start, int) and isinstance(factor, int):
                values = [int(x) for x in values]
    else:
        raise SpaceError(
            f"{where}: bad value for knob '{knob}': expected a list or a range table, got "
            f"{spec!r}. Write e.g. {knob} = [a, b] or {{start = .., stop = .., step = ..}}."
        )
    if not values:
        raise SpaceError(
            f"{where}: empty value list for knob '{knob}': expected at least one value, got "
            f"{spec!r}. List at least one value."
        )
    if knob in NUMERIC_KNOBS:
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise SpaceError(
                    f"{where}: non-numeric value for knob '{knob}': expected numbers, got {v!r}. "
                    "Use numbers."
                )
            if NUMERIC_KNOBS[knob] is int and math.isfinite(v) and float(v) != int(v):
                raise SpaceError(
                    f"{where}: non-integer value for knob '{knob}': expected integers, got {v!r}."
                    " Use whole numbers."
                )
        values = [v if not math.isfinite(v) else NUMERIC_KNOBS[knob](v) for v in values]
    if len(set(values)) != len(values):
        raise SpaceError(
            f"{where}: duplicate values for knob '{knob}': expected distinct values, got "
            f"{values!r}. Remove the duplicates."
        )
    return values


LimitFilter = Callable[[pd.DataFrame, float], np.ndarray]
_LIMIT_FILTERS: dict[str, LimitFilter] = {}


def register_limit(name: str, keep: LimitFilter) -> None:
    """Install how a ``[limits]`` key is applied: ``keep(grid, limit)`` returns a bool per
    config of ``grid``, True for the configs within ``limit``.

    A limit is measured by a later stage (``max_gflops_per_batch`` by
    :mod:`carb_nas.features`), which space must not import; the package root installs
    ``max_gflops_per_batch`` when ``carb_nas`` is imported, so every ``Space`` applies it.
    """
    if name not in _LIMITS:
        raise SpaceError(
            f"unknown limit {name!r}: expected one of {list(_LIMITS)}, got {name!r}. "
            "Add it to space._LIMITS first."
        )
    _LIMIT_FILTERS[name] = keep


class Space:
    """A declared design space: per family, the cross product of its knob values."""

    def __init__(
        self,
        knobs: Mapping[str, Mapping[str, list]],
        name: str = "space",
        carb_ranges: bool = False,
        source: str = "<memory>",
        limits: Mapping[str, float] | None = None,
    ) -> None:
        # knobs: family -> knob -> values (fully resolved, family knob excluded)
        self.name = name
        self.carb_ranges = carb_ranges
        self.source = source
        self.knobs = {f: dict(k) for f, k in knobs.items()}
        self.limits = dict(limits or {})
        self._validate()
        self._grid: pd.DataFrame | None = None

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], source: str = "<memory>") -> Space:
        where = source
        allowed_top = {"name", "description", "carb_ranges", "knobs", "family", "limits"}
        unknown_top = set(doc) - allowed_top
        if unknown_top:
            raise SpaceError(
                f"{where}: unknown top-level keys {sorted(unknown_top)}: expected only "
                f"{sorted(allowed_top)}. Put knobs under [knobs] or [family.<name>]."
            )
        glob = doc.get("knobs", {})
        per_family = doc.get("family", {})
        if not isinstance(glob, dict) or not isinstance(per_family, dict):
            raise SpaceError(
                f"{where}: [knobs] and [family.<name>] must be tables, got "
                f"knobs={type(glob).__name__}, family={type(per_family).__name__}."
                " See search_spaces/resnet.toml for the format."
            )
        for table, label in [(glob, "[knobs]")] + [
            (t, f"[family.{f}]") for f, t in per_family.items() if isinstance(t, dict)
        ]:
            unknown = set(table) - set(CONFIG_COLUMNS)
            if unknown:
                raise SpaceError(
                    f"{where}: unknown knob(s) {sorted(unknown)} in {label}: expected knobs "
                    f"among {list(CONFIG_COLUMNS)}. Fix the spelling or remove them."
                )
        if "family" in glob:
            families = _expand("family", glob["family"], where)
        else:
            families = list(per_family)
        if not families:
            raise SpaceError(
                f"{where}: no families declared: expected `family = [...]` under [knobs] or a "
                "[family.<name>] table, got none. Declare at least one family."
            )
        for fam in list(families) + list(per_family):
            if fam not in FAMILIES:
                raise SpaceError(
                    f"{where}: unknown family {fam!r}: expected one of {list(FAMILIES)}. "
                    "Use 'basic', 'bottleneck' or a built-in family (docs/spaces.md)."
                )
            if fam in per_family and not isinstance(per_family[fam], dict):
                raise SpaceError(
                    f"{where}: [family.{fam}] must be a table, got {per_family[fam]!r}."
                )
        resolved: dict[str, dict[str, list]] = {}
        for fam in families:
            merged = {k: v for k, v in glob.items() if k != "family"}
            merged.update(per_family.get(fam, {}))
            merged.setdefault("runtime", ["torch"])
            merged.setdefault("precision", ["fp32"])
            missing = [k for k in CONFIG_COLUMNS if k != "family" and k not in merged]
            if missing:
                raise SpaceError(
                    f"{where}: family {fam!r} lacks knob(s) {missing}: expected every knob among "
                    f"{[k for k in CONFIG_COLUMNS if k != 'family']}. Add them under [knobs] or "
                    f"[family.{fam}]."
                )
            resolved[fam] = {
                k: _expand(k, merged[k], f"{where} [family.{fam}]")
                for k in CONFIG_COLUMNS
                if k != "family"
            }
        limits = doc.get("limits", {})
        if not isinstance(limits, dict) or set(limits) - set(_LIMITS):
            raise SpaceError(
                f"{where}: bad [limits] table: expected keys among {list(_LIMITS)}, got "
                f"{limits!r}. Remove the unknown keys."
            )
        for k, v in limits.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise SpaceError(
                    f"{where}: bad limit {k}: expected a positive number, got {v!r}. "
                    "Use a number > 0."
                )
        return cls(
            resolved,
            name=str(doc.get("name", Path(source).stem)),
            carb_ranges=bool(doc.get("carb_ranges", False)),
            source=source,
            limits=limits,
        )

    def _validate(self) -> None:
        for fam, knobs in self.knobs.items():
            where = f"{self.source} [family.{fam}]"
            for knob, values in knobs.items():
                for v in values:
                    try:
                        validate_knob(knob, v)
                        if knob == "depth":
                            stage_layout(fam, v)
                    except ConfigError as e:
                        raise SpaceError(f"{where}: {e}") from None
            if self.carb_ranges and fam not in RESNET_FAMILIES:
                raise SpaceError(
                    f"{where}: carb_ranges = true covers ResNets only: expected families among "
                    f"{list(RESNET_FAMILIES)}, got {fam!r}. Set carb_ranges = false."
                )
            if self.carb_ranges:
                for knob in ("depth", "width", "resolution", "batch_size"):
                    lo, hi = _CARB_RANGES.get(f"{knob}.{fam}", _CARB_RANGES.get(knob, (None, None)))
                    out = [v for v in knobs[knob] if not lo <= v <= hi]
                    if out:
                        raise SpaceError(
                            f"{where}: {knob} value {out[0]!r} lies outside CARB's range: "
                            f"expected {lo} <= {knob} <= {hi} because the space sets "
                            "carb_ranges = true. Remove the value or set carb_ranges = false."
                        )

    # -- queries ------------------------------------------------------------------------
    @property
    def families(self) -> list[str]:
        return list(self.knobs)

    def _family_count(self, fam: str) -> int:
        return math.prod(len(v) for v in self.knobs[fam].values())

    def __len__(self) -> int:
        if self.limits:
            return len(self.grid())
        return sum(self._family_count(f) for f in self.knobs)

    def values(self, knob: str) -> list:
        """Union of a knob's values over families, in first-seen order."""
        if knob == "family":
            return self.families
        seen: dict = {}
        for k in self.knobs.values():
            for v in k[knob]:
                seen.setdefault(v, None)
        return list(seen)

    def grid(self) -> pd.DataFrame:
        """Every config as a DataFrame (one row each, columns ``CONFIG_COLUMNS``), vectorized.

        Configs beyond the space's ``[limits]`` are left out. The frame is cached: copy it
        before changing it.
        """
        if self._grid is None:
            self._grid = self._build_grid()
        return self._grid

    def _build_grid(self) -> pd.DataFrame:
        total = sum(self._family_count(f) for f in self.knobs)
        if total > _MAX_GRID_CONFIGS:
            raise SpaceError(
                f"{self.source}: space too large to enumerate: expected at most "
                f"{_MAX_GRID_CONFIGS:,} configs, got {total:,}. Use fewer knob values."
            )
        parts = []
        for fam, knobs in self.knobs.items():
            names = [k for k in CONFIG_COLUMNS if k != "family"]
            arrays = [
                np.asarray(knobs[k], dtype=object if k in ("precision", "runtime") else None)
                for k in names
            ]
            mesh = np.meshgrid(*[np.arange(len(a)) for a in arrays], indexing="ij")
            cols = {"family": np.full(mesh[0].size, fam, dtype=object)}
            for name, arr, idx in zip(names, arrays, mesh):
                cols[name] = arr[idx.ravel()]
            parts.append(pd.DataFrame(cols))
        frame = pd.concat(parts, ignore_index=True)[list(CONFIG_COLUMNS)]
        for name, limit in self.limits.items():
            keep = _LIMIT_FILTERS[name](frame, float(limit))
            frame = frame[np.asarray(keep, dtype=bool)].reset_index(drop=True)
        return frame

    def __iter__(self) -> Iterator[Config]:
        return iter(frame_to_configs(self.grid()))

    def __contains__(self, config: object) -> bool:
        if not isinstance(config, Config) or config.family not in self.knobs:
            return False
        knobs = self.knobs[config.family]
        return all(getattr(config, k) in knobs[k] for k in knobs)

    def sample(self, n: int, seed: int = 0, stratify: bool = False) -> list[Config]:
        """``n`` distinct configs drawn without replacement, in draw order: all of them, in a
        random order, when ``n >= len(self)`` (compare the result's length with ``n``).

        Uniform by default. ``stratify=True`` weights each config by the product over knobs of
        1 / (how often its value occurs in the space), so values that limits make rare (deep,
        wide or high-resolution nets, which fit the cap only at small batches) are drawn about as
        often as common ones and every knob's range is covered.
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0:
            raise ConfigError(
                f"invalid sample size: expected n > 0, got {n!r}. Ask for at least 1."
            )
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ConfigError(
                f"invalid seed: expected an integer >= 0, got {_plain(seed)!r}. Pass e.g. seed=0."
            )
        grid = self.grid()
        rng = np.random.default_rng(seed)
        p = None
        if stratify:
            w = np.ones(len(grid))
            for col in ("family", "depth", "width", "resolution", "batch_size"):
                freq = grid.groupby(["family", col] if col == "depth" else col)[col].transform(
                    "size"
                )
                w /= freq.to_numpy()
            p = w / w.sum()
        idx = rng.choice(len(grid), size=min(n, len(grid)), replace=False, p=p)
        return frame_to_configs(grid.iloc[idx])

    def describe(self) -> str:
        lines = [f"space {self.name!r} ({self.source}): {len(self):,} configs"]
        for name, limit in self.limits.items():
            lines.append(f"  limit {name} = {limit} (configs beyond it are left out)")
        for fam, knobs in self.knobs.items():
            lines.append(f"  family {fam}: {self._family_count(fam):,} configs")
            for k, v in knobs.items():
                shown = v if len(v) <= 12 else v[:5] + ["..."] + v[-3:]
                lines.append(f"    {k:<11} ({len(v)}): {shown}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "carb_ranges": self.carb_ranges,
            "knobs": self.knobs,
            "limits": self.limits,
        }

    @property
    def fingerprint(self) -> str:
        """Stable hash of the space's content (not its file name)."""
        text = repr(
            sorted(
                (f, sorted((k, list(map(str, v))) for k, v in kn.items()))
                for f, kn in self.knobs.items()
            )
        ) + repr(sorted(self.limits.items()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_space(path: str | Path) -> Space:
    """Load a space from a TOML file. Bundled names (``resnet``, ``cpu``) resolve too."""
    p = Path(path)
    if not p.exists():
        bundled = bundled_space_path(str(path))
        if bundled is None:
            raise MissingFileError(
                f"space file not found: expected an existing TOML file or a bundled space name "
                f"({', '.join(_bundled_space_names())}), got {str(path)!r}. Check the path."
            )
        p = bundled
    try:
        doc = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise SpaceError(
            f"{p}: malformed TOML: expected a valid TOML document, got a parse error ({e}). "
            "Fix the syntax at that line."
        ) from None
    except UnicodeDecodeError:
        raise SpaceError(f"{p}: expected a UTF-8 TOML text file, got binary data.") from None
    except IsADirectoryError:
        raise SpaceError(f"{p}: expected a TOML file, got a directory.") from None
    return Space.from_dict(doc, source=str(p))


def _spaces_dir() -> Path:
    return Path(__file__).resolve().parent / "search_spaces"


def _bundled_space_names() -> list[str]:
    return sorted(p.stem for p in _spaces_dir().glob("*.toml"))


def bundled_space_path(name: str) -> Path | None:
    p = _spaces_dir() / f"{Path(name).stem}.toml"
    return p if p.exists() and ("/" not in name or name.startswith("search_spaces/")) else None


# -- configs tables -------------------------------------------------------------------------
def configs_to_frame(configs: Sequence[Config]) -> pd.DataFrame:
    return pd.DataFrame([c.as_dict() for c in configs], columns=list(CONFIG_COLUMNS))


def frame_to_configs(frame: pd.DataFrame) -> list[Config]:
    cols = [frame[c].tolist() for c in CONFIG_COLUMNS]
    return [Config(*row) for row in zip(*cols)]


def _fail(source: str | None, message: str) -> ConfigError | InputFileError:
    return ConfigError(message) if source is None else InputFileError(f"{source}: {message}")


def factorize_configs(
    frame: pd.DataFrame, source: str | None = None
) -> dict[str, tuple[np.ndarray, list[Any]]]:
    """Validate the config columns of ``frame``, once per distinct value, and encode them.

    Returns, for each column of :data:`CONFIG_COLUMNS` that ``frame`` holds, ``(codes,
    values)``: int64 codes, one per row, into the list of its distinct values as
    :func:`validate_knob` types them (``frame[col]`` equals ``values[codes]``). Each distinct
    (family, depth) pair is checked with :func:`stage_layout`. Needs the
    :data:`REQUIRED_COLUMNS`. Raises :class:`~carb_nas.errors.ConfigError`, or
    :class:`~carb_nas.errors.InputFileError` prefixed with ``source`` when one is given,
    naming the column, the data row (1-based), the allowed values and the value found.
    """
    if not isinstance(frame, pd.DataFrame):
        raise _fail(
            source,
            f"not a table of configs: expected a pandas DataFrame with the columns "
            f"{list(REQUIRED_COLUMNS)}[, precision, runtime], got {type(frame).__name__}. "
            "Use space.grid(), configs_to_frame() or carb_nas.datasets.read_configs().",
        )
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise _fail(
            source,
            f"missing column(s) {missing}: expected the columns {list(CONFIG_COLUMNS)} "
            f"(precision and runtime optional), got {list(map(str, frame.columns))}. "
            "Add the missing columns.",
        )
    encoded: dict[str, tuple[np.ndarray, list[Any]]] = {}
    for col in CONFIG_COLUMNS:
        if col not in frame.columns:
            continue
        codes, uniques = pd.factorize(frame[col], use_na_sentinel=True)
        if (codes < 0).any():
            row = int(np.flatnonzero(codes < 0)[0])
            raise _fail(
                source,
                f"missing {col} at data row {row + 1}: expected a value in every row, got "
                f"{_plain(frame[col].iloc[row])!r}. Fill in that cell.",
            )
        values = []
        for i, value in enumerate(uniques):
            try:
                values.append(validate_knob(col, value))
            except ConfigError as e:
                row = int(np.argmax(codes == i))
                raise _fail(source, _at_row(str(e), row)) from None
        encoded[col] = (codes.astype(np.int64, copy=False), values)
    fam_codes, families = encoded["family"]
    dep_codes, depths = encoded["depth"]
    pairs, first = np.unique(fam_codes * len(depths) + dep_codes, return_index=True)
    for pair, row in zip(pairs.tolist(), first.tolist()):
        try:
            stage_layout(families[pair // len(depths)], depths[pair % len(depths)])
        except ConfigError as e:
            raise _fail(source, _at_row(str(e), row)) from None
    return encoded


def _at_row(message: str, row: int) -> str:
    what, rest = message.split(":", 1)  # "invalid width: expected ..." names the column
    return f"{what} at data row {row + 1}:{rest}"


def normalize_config_frame(frame: pd.DataFrame, source: str = "<table>") -> pd.DataFrame:
    """``frame`` with its config columns validated (:func:`factorize_configs`) and typed:
    int depth, resolution and batch_size, float width, str names; precision and runtime
    filled in with fp32 and torch where absent. Other columns are kept."""
    encoded = factorize_configs(frame, source=source)
    out = frame.copy()
    for col in CONFIG_COLUMNS:
        if col not in encoded:
            out[col] = _CONFIG_DEFAULTS[col]
            continue
        codes, values = encoded[col]
        kind = NUMERIC_KNOBS.get(col, object)
        out[col] = np.asarray(values, dtype=kind)[codes]
    return out


# -- built-in families beyond ResNet ----------------------------------------------------------
# Each family keeps the seven config columns: ``family`` names the variant (VGG with or without
# BN, ResNeXt's cardinality x group width, RegNet's generator), ``width`` multiplies channels and
# ``depth`` is the number the family's papers use for depth: weighted layers where the model's
# name carries one (ResNeXt-50, VGG-16, DenseNet-121), blocks elsewhere (MobileNet, EfficientNet,
# RegNet's d). The standard depth at width 1 is the torchvision model (docs/spaces.md).
_GROUPS = {
    "resnext": ("resnext32x4d", "resnext32x8d", "resnext64x4d"),
    "vgg": ("vgg", "vgg_bn"),
    "densenet": ("densenet",),
    "mobilenet_v2": ("mobilenet_v2",),
    "mobilenet_v3": ("mobilenet_v3_large", "mobilenet_v3_small"),
    "efficientnet": ("efficientnet",),
    "regnet": tuple(f for f in ZOO_FAMILIES if f.startswith("regnet_")),
}
# Per-stage proportions that spread a non-standard depth's units over the stages (largest
# remainder, at least one per stage); at the standard count they give the standard network.
_STAGE_UNITS = {
    "vgg": (2, 2, 4, 4, 4),  # convs per stage (VGG-19's proportions)
    "densenet": (6, 12, 24, 16),  # layers per dense block (DenseNet-121's)
    "mobilenet_v2": (1, 2, 3, 4, 3, 3, 1),
    "mobilenet_v3_large": (1, 2, 3, 4, 2, 3),
    "mobilenet_v3_small": (1, 2, 3, 2, 3),
    "efficientnet": (1, 2, 2, 3, 3, 4, 1),
}
_STANDARD_ZOO_LAYOUTS = {
    ("vgg", 11): (1, 1, 2, 2, 2),
    ("vgg", 13): (2, 2, 2, 2, 2),
    ("vgg", 16): (2, 2, 3, 3, 3),
    ("vgg", 19): (2, 2, 4, 4, 4),
    ("densenet", 121): (6, 12, 24, 16),
    ("densenet", 161): (6, 12, 36, 24),
    ("densenet", 169): (6, 12, 32, 32),
    ("densenet", 201): (6, 12, 48, 32),
    # EfficientNet-B1..B7's depth multipliers (ceil per stage): 1.1/1.2, 1.4, 1.8, 2.2, 2.6, 3.1
    ("efficientnet", 23): (2, 3, 3, 4, 4, 5, 2),
    ("efficientnet", 26): (2, 3, 3, 5, 5, 6, 2),
    ("efficientnet", 32): (2, 4, 4, 6, 6, 8, 2),
    ("efficientnet", 39): (3, 5, 5, 7, 7, 9, 3),
    ("efficientnet", 45): (3, 6, 6, 8, 8, 11, 3),
    ("efficientnet", 55): (4, 7, 7, 10, 10, 13, 4),
}
# RegNet generators (Radosavovic et al. 2020; torchvision's): w_0, w_a, w_m, group width,
# squeeze-excitation ratio (RegNetY).
REGNET_PARAMS: dict[str, tuple[int, float, float, int, float]] = {
    "regnet_x_400mf": (24, 24.48, 2.54, 16, 0.0),
    "regnet_x_800mf": (56, 35.73, 2.28, 16, 0.0),
    "regnet_x_1_6gf": (80, 34.01, 2.25, 24, 0.0),
    "regnet_x_3_2gf": (88, 26.31, 2.25, 48, 0.0),
    "regnet_y_400mf": (48, 27.89, 2.09, 8, 0.25),
    "regnet_y_800mf": (56, 38.84, 2.4, 16, 0.25),
    "regnet_y_1_6gf": (48, 20.71, 2.65, 24, 0.25),
    "regnet_y_3_2gf": (80, 42.63, 2.66, 24, 0.25),
}
_DEPTH_FORMS = {  # family group -> (offset, units per step, what a unit is)
    "vgg": (3, 1, "conv"),
    "densenet": (5, 2, "dense layer"),
}


def family_group(family: str) -> str:
    """The builder a family belongs to: ``resnet`` (basic, bottleneck), ``resnext``, ``vgg``,
    ``densenet``, ``mobilenet_v2``, ``mobilenet_v3``, ``efficientnet`` or ``regnet``."""
    if family in RESNET_FAMILIES:
        return "resnet"
    for group, members in _GROUPS.items():
        if family in members:
            return group
    raise ConfigError(
        f"unknown family: expected one of {list(FAMILIES)}, got {family!r}. "
        "Use 'basic', 'bottleneck' or a built-in family (docs/spaces.md)."
    )


def _spread(units: int, weights: Sequence[int]) -> tuple[int, ...]:
    """``units`` over ``len(weights)`` stages in proportion to ``weights`` (largest remainder,
    ties to the earlier stage, every stage at least one)."""
    total = sum(weights)
    raw = [units * w / total for w in weights]
    alloc = [max(1, math.floor(r)) for r in raw]
    while sum(alloc) < units:
        i = max(range(len(raw)), key=lambda j: (raw[j] - alloc[j], -j))
        alloc[i] += 1
    while sum(alloc) > units:
        i = min((j for j in range(len(raw)) if alloc[j] > 1), key=lambda j: (raw[j] - alloc[j], j))
        alloc[i] -= 1
    return tuple(alloc)


def regnet_block_widths(family: str, depth: int, width: float = 1.0) -> list[int]:
    """Per-block output widths of a RegNet (torchvision's ``BlockParams.from_init_params``,
    in float32 as there), before the group-width adjustment. ``width`` scales ``w_0``'s
    widths (quantized to multiples of 8, at least 8); the block capacities, hence the stage
    depths, depend on ``depth`` only."""
    w_0, w_a, w_m, _, _ = REGNET_PARAMS[family]
    f32 = np.float32
    cont = np.arange(depth).astype(f32) * f32(w_a) + f32(w_0)
    capacity = np.round(np.log(cont / f32(w_0)) / f32(math.log(w_m)))
    scaled = f32(w_0) * np.power(f32(w_m), capacity.astype(f32)) * f32(width)
    return [max(8, int(v)) for v in (np.round(scaled / f32(8)) * 8).tolist()]


def _regnet_layout(family: str, depth: int) -> tuple[int, ...]:
    """Blocks per stage of a RegNet of ``depth`` blocks (a stage per distinct width)."""
    widths = regnet_block_widths(family, depth)
    stages = [1]
    for prev, cur in zip(widths, widths[1:]):
        if cur == prev:
            stages[-1] += 1
        else:
            stages.append(1)
    return tuple(stages)


def _zoo_layout(family: str, depth: int) -> tuple[int, ...]:
    """Units per stage of a built-in non-ResNet family: blocks per stage (ResNeXt as the
    bottleneck ResNet; MobileNets, EfficientNet, RegNet), convs per stage (VGG), layers per
    dense block (DenseNet). Standard depths have their published layouts; other depths spread
    over the stages in the family's proportions (:data:`_STAGE_UNITS`)."""
    group = family_group(family)
    if depth > _MAX_DEPTH:
        raise ConfigError(
            f"invalid depth for the {family} family: expected depth <= {_MAX_DEPTH}, got "
            f"{depth!r}. Pick a smaller depth."
        )
    if group == "resnext":
        return stage_layout("bottleneck", depth)
    if group == "regnet":
        return _regnet_layout(family, depth)
    key = "vgg" if group == "vgg" else family
    if (key, depth) in _STANDARD_ZOO_LAYOUTS:
        return _STANDARD_ZOO_LAYOUTS[(key, depth)]
    weights = _STAGE_UNITS[key]
    offset, per, unit = _DEPTH_FORMS.get(group, (0, 1, "block"))
    units, rest = divmod(depth - offset, per)
    if rest or units < len(weights):
        first = offset + per * len(weights)
        form = f"depth = {offset} + {per} x {unit}s" if per > 1 or offset else "depth = blocks"
        raise ConfigError(
            f"invalid depth for the {family} family: expected {form} with at least "
            f"{len(weights)} {unit}s (e.g. {[first + per * i for i in range(3)]}...), got "
            f"{depth}. Pick a depth of that form (standard: {ZOO_FAMILIES[family]})."
        )
    return _spread(units, weights)
