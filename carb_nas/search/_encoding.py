"""Integer encoding of a Space for evolutionary search (one variable per varying knob)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from carb_nas.errors import ConfigError
from carb_nas.space import CONFIG_COLUMNS, NUMERIC_KNOBS, Space

_NUMERIC_KNOBS = tuple(NUMERIC_KNOBS)


class SpaceEncoding:
    """Integer encoding of a Space: one variable per knob that takes more than one value.

    Variable ``j`` is an index into the knob's values over all families (numbers ascending, so
    neighbouring indices are neighbouring values, which suits SBX and polynomial mutation;
    names in declared order). A family that lacks a value maps the index to its nearest
    allowed value.
    """

    def __init__(self, space: Space) -> None:
        self.space = space
        self.families = list(space.families)
        self.values: dict[str, list] = {}
        for knob in CONFIG_COLUMNS:
            vals = space.values(knob)
            self.values[knob] = sorted(vals) if knob in _NUMERIC_KNOBS else list(vals)
        self.var_knobs = [k for k in CONFIG_COLUMNS if len(self.values[k]) > 1]
        # table[knob][family_index, union_index] -> index into self.values[knob]
        self._table: dict[str, np.ndarray] = {}
        for knob in CONFIG_COLUMNS:
            union = self.values[knob]
            tab = np.empty((len(self.families), len(union)), dtype=np.int64)
            for fi, fam in enumerate(self.families):
                allowed = (
                    [union.index(fam)]
                    if knob == "family"
                    else [union.index(v) for v in space.knobs[fam][knob]]
                )
                allowed_arr = np.asarray(allowed)
                for u in range(len(union)):
                    tab[fi, u] = allowed_arr[np.argmin(np.abs(allowed_arr - u))]
            self._table[knob] = tab

    @property
    def n_var(self) -> int:
        return len(self.var_knobs)

    @property
    def upper(self) -> np.ndarray:
        return np.array([len(self.values[k]) - 1 for k in self.var_knobs], dtype=float)

    def decode(self, X: Any) -> pd.DataFrame:
        """Configs (CONFIG_COLUMNS) of the rows of X (rounded and clipped to the bounds)."""
        X = (
            np.asarray(X, dtype=float).reshape(-1, self.n_var)
            if self.n_var
            else np.zeros((len(X), 0))
        )
        Xi = np.clip(np.rint(X), 0, self.upper).astype(np.int64) if self.n_var else X.astype(int)
        n = len(Xi)
        col = {k: j for j, k in enumerate(self.var_knobs)}
        fam_idx = Xi[:, col["family"]] if "family" in col else np.zeros(n, dtype=np.int64)
        out = {}
        for knob in CONFIG_COLUMNS:
            u = Xi[:, col[knob]] if knob in col else np.zeros(n, dtype=np.int64)
            idx = self._table[knob][fam_idx, u]
            arr = np.asarray(
                self.values[knob],
                dtype=object if knob in ("family", "precision", "runtime") else None,
            )
            out[knob] = arr[idx]
        return pd.DataFrame(out)[list(CONFIG_COLUMNS)]

    def encode(self, frame: pd.DataFrame) -> np.ndarray:
        """Integer rows for the configs of ``frame`` (the inverse of :meth:`decode`)."""
        cols = []
        for knob in self.var_knobs:
            lookup = {v: i for i, v in enumerate(self.values[knob])}
            try:
                cols.append([lookup[v] for v in frame[knob].tolist()])
            except KeyError as e:
                raise ConfigError(
                    f"value {e.args[0]!r} of knob {knob!r} is not in the space: expected one of "
                    f"{self.values[knob]}. Pick configs from the space."
                ) from None
        return np.array(cols, dtype=float).T.reshape(len(frame), self.n_var)

    def config_codes(self, frame: pd.DataFrame) -> np.ndarray:
        """One int64 per config (mixed radix over the knob indices) for caching."""
        code = np.zeros(len(frame), dtype=np.int64)
        for knob in CONFIG_COLUMNS:
            lookup = {v: i for i, v in enumerate(self.values[knob])}
            idx = frame[knob].map(lookup).to_numpy()
            code = code * len(self.values[knob]) + idx.astype(np.int64)
        return code
