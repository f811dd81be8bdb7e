"""Saving and loading a CostModel without pickle, with a manifest whose integrity is checked.

A saved model is a directory: XGBoost UBJSON, LightGBM text, skops for ExtraTrees (loaded with
an explicit trusted-type list) and ``manifest.json`` holding the schema, blend weights, offset
costs, conformal scores, platform, versions, the SHA-256 of every model file and the SHA-256
of the manifest's own canonical content (``manifest_sha256``): an edited number anywhere in the
manifest is refused on load, as an edited model file is.
"""

from __future__ import annotations

import hashlib
import json
import platform as _platform
import time
from pathlib import Path
from typing import Any

from carb_nas._io import atomic_directory, atomic_write_json, check_writable_dir
from carb_nas._json import jsonable
from carb_nas.costmodel._common import (
    FORMAT_NAME,
    FORMAT_VERSION,
    err,
    library_versions,
    package_version,
    sha256_file,
)
from carb_nas.costmodel._learners import LEARNERS
from carb_nas.costmodel._schema import InputSchema
from carb_nas.errors import ModelError

MANIFEST = "manifest.json"
_DIGEST_KEY = "manifest_sha256"
_FIRST_DIGEST_VERSION = 3  # manifests from format 3 on carry their own checksum

# skops: the only non-default types an ExtraTrees file may hold (checked on load).
_SKOPS_TRUSTED = [
    "sklearn.ensemble._forest.ExtraTreesRegressor",
    "sklearn.tree._classes.ExtraTreeRegressor",
    "sklearn.tree._tree.Tree",
]


def manifest_sha256(manifest: dict[str, Any]) -> str:
    """SHA-256 of a manifest's canonical JSON (sorted keys, no whitespace), its own
    ``manifest_sha256`` left out."""
    doc = {k: v for k, v in manifest.items() if k != _DIGEST_KEY}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def check_output_dir(path: str | Path, marker: str, what: str, option: str = "-o/--output") -> Path:
    """``path`` may be replaced as a whole: it does not exist, is empty, or holds ``marker``
    (a previous output of the same kind). Anything else is refused before any work, so no
    user file is ever swept away with an old output."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise err(
            f"{what} path is a file",
            "a directory path",
            repr(str(p)),
            "Choose a directory path (it is created).",
        )
    if p.is_dir() and any(p.iterdir()) and not (p / marker).is_file():
        raise err(
            f"{what} directory holds other files",
            f"a new or empty directory, or one with a previous {marker}",
            repr(str(p)),
            "Choose another directory; nothing in it was changed.",
        )
    return check_writable_dir(p, f"{what} directory", option, replaced=True)


def _write_files(model: Any, d: Path) -> None:
    import skops.io as sio

    files: dict[str, str] = {}
    learners: dict[str, dict[str, str]] = {}
    for t in model.targets_:
        names = {"xgb": f"{t}.xgb.ubj", "lgbm": f"{t}.lgbm.txt", "et": f"{t}.et.skops"}
        model.learners_[t]["xgb"].save_model(str(d / names["xgb"]))
        model.learners_[t]["lgbm"].save_model(str(d / names["lgbm"]))
        sio.dump(model.learners_[t]["et"], d / names["et"], compression=8)
        if model.correctors_.get(t) is not None:
            names["corrector"] = f"{t}.corrector.lgbm.txt"
            model.correctors_[t].save_model(str(d / names["corrector"]))
        learners[t] = names
        for name in names.values():
            files[name] = sha256_file(d / name)
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "package_version": package_version(),
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": _platform.python_version(),
        "library_versions": library_versions(),
        "params": model.get_params(),
        "learner_params": model.learner_params_,
        "targets": list(model.targets_),
        "transforms": model.transforms_,
        "offsets": model.offsets_,
        "offset_coefs": model.offset_coefs_,
        "schema": model.schema_.to_dict(),
        "feature_names": model.schema_.feature_names,
        "blend_weights": model.blend_weights_,
        "learners": learners,
        "correctors": {t: model.correctors_.get(t) is not None for t in model.targets_},
        "conformal": model.conformal_,
        "platform": model.platform_,
        "space_fingerprint": model.space_fingerprint_,
        "training_sha256": model.training_sha256_,
        "fit_info": model.fit_info_,
        "files": files,
    }
    # hash what a load will read back (numpy scalars plain, NaN as null)
    manifest = json.loads(json.dumps(jsonable(manifest), allow_nan=False))
    manifest[_DIGEST_KEY] = manifest_sha256(manifest)
    atomic_write_json(d / MANIFEST, manifest)


def save_model(model: Any, directory: str | Path) -> Path:
    """Write ``model`` into ``directory`` atomically (see :meth:`CostModel.save`)."""
    d = check_output_dir(directory, MANIFEST, "model")
    with atomic_directory(d) as tmp:
        _write_files(model, tmp)
    return d


def _read_manifest(d: Path) -> dict[str, Any]:
    mpath = d / MANIFEST
    if not mpath.is_file():
        raise err(
            "not a saved cost model",
            f"a directory with manifest.json ({d})",
            "no manifest.json" if d.is_dir() else "no such directory",
            "Pass a directory written by CostModel.save or `carb-nas model train`.",
        )
    try:
        m = json.loads(mpath.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise err(
            "corrupted model manifest",
            "valid JSON in manifest.json",
            str(e),
            "Re-save or retrain the model.",
        ) from e
    if not isinstance(m, dict) or m.get("format") != FORMAT_NAME:
        raise err(
            "not a carb_nas cost model",
            f"manifest format {FORMAT_NAME!r}",
            repr(m.get("format") if isinstance(m, dict) else type(m).__name__),
            "Pass a directory written by CostModel.save.",
        )
    fv = m.get("format_version")
    if not isinstance(fv, int) or fv > FORMAT_VERSION or fv < 1:
        raise err(
            "unsupported model format version",
            f"a version between 1 and {FORMAT_VERSION} (this carb_nas {package_version()})",
            f"{fv!r} (written by carb_nas {m.get('package_version')})",
            "Upgrade carb_nas to read it, or retrain the model with this version.",
        )
    if fv >= _FIRST_DIGEST_VERSION:
        stored = m.get(_DIGEST_KEY)
        got = manifest_sha256(m)
        if stored != got:
            raise err(
                f"model manifest {mpath} was edited (its checksum does not match its content)",
                f"sha256 {str(stored)[:16]}... as saved",
                f"sha256 {got[:16]}...",
                "Restore the original manifest.json or retrain; never load an edited model.",
            )
    return m


def _check_files(d: Path, files: Any) -> dict[str, str]:
    if not isinstance(files, dict):
        raise err("incomplete model manifest", "a files table", type(files).__name__, "Retrain.")
    for name, digest in files.items():
        if Path(name).name != name:
            raise err(
                "unsafe file name in the model manifest",
                "plain file names",
                repr(name),
                "The manifest was tampered with; retrain the model.",
            )
        p = d / name
        if not p.is_file():
            raise err(
                "model file missing",
                f"{name} listed in the manifest",
                "no file",
                "Copy the whole model directory, or retrain the model.",
            )
        got = sha256_file(p)
        if got != digest:
            raise err(
                f"model file {name} was modified (checksum mismatch)",
                f"sha256 {str(digest)[:16]}...",
                f"sha256 {got[:16]}...",
                "Restore the original file or retrain; never load edited files.",
            )
    return files


def _check_targets(m: dict[str, Any]) -> None:
    """Every target the manifest names has each per-target part (else predict fails later)."""
    targets = m["targets"]
    if not isinstance(targets, list) or not targets:
        raise err(
            "incomplete model manifest", "a non-empty targets list", repr(targets), "Retrain."
        )
    for t in targets:
        lacking = [
            part
            for part in ("transforms", "blend_weights", "learners", "conformal")
            if not isinstance(m[part], dict) or t not in m[part]
        ]
        weights = m["blend_weights"].get(t) if isinstance(m["blend_weights"], dict) else None
        if not lacking and not (isinstance(weights, dict) and set(LEARNERS) <= set(weights)):
            lacking.append("blend_weights of xgb/lgbm/et")
        scores = m["conformal"].get(t) if isinstance(m["conformal"], dict) else None
        if not lacking and not (isinstance(scores, dict) and {"all", "low", "high"} <= set(scores)):
            lacking.append("conformal scores all/low/high")
        if lacking:
            raise err(
                f"incomplete model manifest: target {t!r} has no {', '.join(lacking)}",
                "every part CostModel.save writes for each of its targets",
                f"targets {targets}",
                "Restore the original manifest.json or retrain the model.",
            )


def load_model_dir(cls: type, directory: str | Path) -> Any:
    """A ``cls`` instance from a directory written by :func:`save_model`, fully verified."""
    d = Path(directory)
    m = _read_manifest(d)
    files = _check_files(d, m.get("files", {}))
    try:
        _check_targets(m)
        params = dict(m["params"])
        model = cls(**params)
        model.targets_ = list(m["targets"])
        model.transforms_ = dict(m["transforms"])
        model.offsets_ = dict(m.get("offsets", {}))
        model.offset_coefs_ = {
            t: {c: float(v) for c, v in cs.items()} for t, cs in m.get("offset_coefs", {}).items()
        }
        model.schema_ = InputSchema(m["schema"])
        model.blend_weights_ = {
            t: {k: float(v) for k, v in w.items()} for t, w in m["blend_weights"].items()
        }
        model.conformal_ = m["conformal"]
        model.learner_params_ = m.get("learner_params")
        model.platform_ = m.get("platform")
        model.space_fingerprint_ = m.get("space_fingerprint")
        model.training_sha256_ = m.get("training_sha256")
        model.fit_info_ = m.get("fit_info", {})
        learners_doc = m["learners"]
    except ModelError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise err(
            "incomplete model manifest",
            "every field CostModel.save writes",
            f"an error reading it ({type(e).__name__}: {e})",
            "Retrain and re-save the model.",
        ) from e
    if model.schema_.feature_names != m.get("feature_names"):
        raise err(
            "inconsistent model manifest",
            "feature_names matching the schema",
            "a mismatch",
            "Retrain and re-save the model.",
        )
    import lightgbm as lgb
    import skops.io as sio
    import xgboost as xgb
    from sklearn.ensemble import ExtraTreesRegressor

    model.learners_, model.correctors_ = {}, {}
    for t in model.targets_:
        names = learners_doc[t]
        unlisted = [n for n in names.values() if n not in files]
        if unlisted:
            raise err(
                "model file without checksum",
                "every model file listed in manifest files",
                unlisted,
                "Retrain and re-save the model.",
            )
        try:
            booster = xgb.Booster()
            booster.load_model(str(d / names["xgb"]))
            lgbm = lgb.Booster(model_file=str(d / names["lgbm"]))
            et = sio.load(d / names["et"], trusted=_SKOPS_TRUSTED)
            corr = (
                lgb.Booster(model_file=str(d / names["corrector"]))
                if "corrector" in names
                else None
            )
        except Exception as e:  # noqa: BLE001 - library-specific load errors
            raise err(
                f"unreadable model file for target {t!r}",
                "files CostModel.save wrote",
                f"{type(e).__name__}: {e}",
                "Retrain the model with this carb_nas version.",
            ) from e
        if not isinstance(et, ExtraTreesRegressor):
            raise err(
                "unexpected object in the ExtraTrees file",
                "an ExtraTreesRegressor",
                type(et).__name__,
                "Retrain the model.",
            )
        model.learners_[t] = {"xgb": booster, "lgbm": lgbm, "et": et}
        model.correctors_[t] = corr
    import numpy as np

    model.feature_names_in_ = np.asarray(model.schema_.input_columns, dtype=object)
    model.n_features_in_ = len(model.schema_.input_columns)
    return model
