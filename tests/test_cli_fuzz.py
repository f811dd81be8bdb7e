"""A net under every CLI verb: malformed files, values and flags, generated from a seed.

Each case is one ``carb-nas`` call in a fresh working directory holding valid and malformed
inputs. Whatever the call, it must end with exit code 0 or 1, no Python traceback, and:
- inputs unchanged (content hash of every file that existed before);
- after a failure (exit 1), no new file or directory anywhere in the working directory.

Cases are generated, not hand-written: every verb gets each of its slots filled with a valid
value or a malformed one (at least one malformed per case, so failures are cheap and the error
paths are what gets exercised). The default run draws ``FUZZ_CASES_FAST`` cases per verb (17
verbs: about 400 cases); ``-m slow`` draws ``FUZZ_CASES_SLOW`` more per verb with other seeds
(about 2,000).
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from carb_nas.cli import cli

FUZZ_CASES_FAST = 24  # per verb
FUZZ_CASES_SLOW = 120  # per verb

# -- the working directory every case starts from ---------------------------------------------
GOOD_SPACE = """
[knobs]
family = ["basic"]
depth = [8, 10]
width = [0.1, 0.125]
resolution = [32]
batch_size = [1, 2]
precision = ["fp32"]
runtime = ["torch"]
"""

BAD_TEXT = {
    "empty.csv": "",
    "header_only.csv": "family,depth,width,resolution,batch_size,precision,runtime\n",
    "torn.csv": "family,depth,width,resolution,batch_size,precision,runtime\nbasic,8,0.1,32,1,fp",
    "wrong_cols.csv": "a,b,c\n1,2,3\n",
    "nan_width.csv": "family,depth,width,resolution,batch_size,precision,runtime\n"
    "basic,8,nan,32,1,fp32,torch\n",
    "huge_width.csv": "family,depth,width,resolution,batch_size,precision,runtime\n"
    "basic,8,1e30,32,1,fp32,torch\n",
    "neg_depth.csv": "family,depth,width,resolution,batch_size,precision,runtime\n"
    "basic,-8,0.5,32,1,fp32,torch\n",
    "garbage.toml": "this is = = not toml [[[",
    "nan.toml": GOOD_SPACE.replace("width = [0.1, 0.125]", "width = [nan]"),
    "huge_depth.toml": GOOD_SPACE.replace("depth = [8, 10]", "depth = [2000000]"),
    "unknown_knob.toml": GOOD_SPACE + "colour = ['red']\n",
    "empty.toml": "",
    "binary.csv": "\x00\x01\x02\xff\xfe garbage \x00",
    "model_dir_file": "not a directory",
}


@dataclass(frozen=True)
class Env:
    """Valid inputs shared by every case (built once per session, copied per case)."""

    root: Path


@pytest.fixture(scope="session")
def fuzz_env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    root = tmp_path_factory.mktemp("fuzz_env")
    from carb_nas.datasets import load_dataset

    (root / "good.toml").write_text(GOOD_SPACE)
    rows = load_dataset("cpu/torch/fp32")
    rows.sample(120, random_state=0).to_csv(root / "rows.csv", index=False)
    cols = ["family", "depth", "width", "resolution", "batch_size", "precision", "runtime"]
    rows[cols].head(4).to_csv(root / "configs.csv", index=False)
    other = load_dataset("cpu/onnxruntime/fp32")
    other.sample(120, random_state=0).to_csv(root / "rows_ort.csv", index=False)
    for name, text in BAD_TEXT.items():
        (root / name).write_text(text, errors="surrogateescape")
    (root / "a_dir").mkdir()
    for rows_file, model_dir in (("rows.csv", "model"), ("rows_ort.csv", "model_ort")):
        res = CliRunner().invoke(
            cli,
            ["model", "train", str(root / rows_file), "-o", str(root / model_dir)]
            + ["--preset", "fast", "--threads", "1"],
        )
        assert res.exit_code == 0, res.output
    return Env(root)


def _as_if_shipped(env: Env):
    """The fast fixture models stand in for the shipped ones (training those takes a minute)."""
    import carb_nas.costmodel._defaults as defaults

    shipped = {"cpu/torch/fp32": env.root / "model", "cpu/onnxruntime/fp32": env.root / "model_ort"}
    mp = pytest.MonkeyPatch()
    mp.setattr(
        defaults, "default_model_dir", lambda p="cpu/torch/fp32": shipped.get(p, env.root / "none")
    )
    return mp


# -- slots: each yields a valid or a malformed value ------------------------------------------
def _files(*names: str) -> Callable[[random.Random, bool], str]:
    def pick(rng: random.Random, good: bool) -> str:
        if good:
            return rng.choice(names)
        return rng.choice(
            list(BAD_TEXT) + ["a_dir", "missing.csv", "missing.toml", "/proc/x", "rows_ort.csv"]
        )

    return pick


def _number(good: list[str], bad: list[str] | None = None) -> Callable[[random.Random, bool], str]:
    bad = bad or ["0", "-1", "-3", "nan", "inf", "1e30", "x", "", "1e400", "0.0000001"]

    def pick(rng: random.Random, ok: bool) -> str:
        return rng.choice(good if ok else bad)

    return pick


def _choice(good: list[str], bad: list[str]) -> Callable[[random.Random, bool], str]:
    return lambda rng, ok: rng.choice(good if ok else bad)


def _out(suffixes: tuple[str, ...] = (".csv",)) -> Callable[[random.Random, bool], str]:
    def pick(rng: random.Random, ok: bool) -> str:
        if ok:
            return (
                "out/result" + rng.choice(suffixes)
                if rng.random() < 0.3
                else "result" + rng.choice(suffixes)
            )
        return rng.choice(
            ["/proc/x/out.csv", "a_dir", "no/such/dir/out.csv", "out.txt", "rows.csv", "good.toml"]
        )

    return pick


def _outdir() -> Callable[[random.Random, bool], str]:
    return lambda rng, ok: (
        rng.choice(["newdir", "new/nested"])
        if ok
        else rng.choice(["/proc/x", "rows.csv", "model_dir_file"])
    )


BUDGET = _choice(
    ["latency_ms=20", "peak_mem_mb=100", "latency_ms_per_image=5"],
    ["latency_ms", "latency=5", "latency_ms=-1", "latency_ms=nan", "energy_j=1", "=", "x=1"],
)
MODEL = _choice(
    ["model", "cpu/torch/fp32"],
    ["missing_model", "rows.csv", "a_dir", "gpu/x/fp99", "model_dir_file"],
)
SPACE = _files("good.toml")
CONFIGS = _files("configs.csv", "good.toml")
ROWS = _files("rows.csv")
SEED = _number(["0", "1", "7"], ["-1", "x", "1e30", "2.5", ""])
CONF = _number(["0.9", "0.95"], ["5", "-1", "0", "1", "nan", "x"])

# verb -> (positional slots, option slots); option slots are (flag, slot) or (flag, None) flags
VERBS: dict[tuple[str, ...], tuple[list, list]] = {
    ("space", "count"): ([SPACE], [("--json", None)]),
    ("space", "show"): ([SPACE], []),
    ("space", "sample"): (
        [SPACE],
        [
            ("-n", _number(["3", "5"], ["0", "-1", "100000", "x"])),
            ("--seed", SEED),
            ("-o", _out()),
            ("--stratify", None),
        ],
    ),
    ("space", "features"): ([CONFIGS], [("--json", None), ("-o", _out((".csv", ".parquet")))]),
    ("dataset", "status"): ([_choice(["campaign"], ["a_dir", "missing_dir", "rows.csv"])], []),
    ("dataset", "export"): (
        [_choice(["campaign"], ["a_dir", "missing_dir", "rows.csv"])],
        [
            ("-o", _out()),
            (
                "--storage",
                _choice(
                    ["journal:campaign/journal.log"],
                    ["bogus://x", "sqlite:///nope.db", "journal:/proc/x/j"],
                ),
            ),
        ],
    ),
    ("dataset", "merge"): ([ROWS, ROWS], [("-o", _out())]),
    ("dataset", "list"): (
        [],
        [("--json", None), ("--source", _choice(["all", "measured", "published"], ["x", ""]))],
    ),
    ("model", "train"): (
        [ROWS],
        [
            ("-o", _outdir()),
            ("--preset", _choice(["fast"], ["paper", ""])),
            ("--alpha", _number(["0.1"], ["2", "-1", "0", "nan"])),
            ("--test-fraction", _number(["0.2"], ["0", "1", "-0.5", "2"])),
            ("--threads", _number(["1"], ["0", "-2", "x", "100000"])),
            ("--seed", SEED),
            (
                "--offset",
                _choice(["latency_ms=flops"], ["latency_ms=nope", "x=flops", "latency_ms"]),
            ),
        ],
    ),
    ("model", "evaluate"): (
        [MODEL, ROWS],
        [
            ("--json", None),
            ("--alpha", _number(["0.1"], ["2", "-1"])),
            ("--report", _outdir()),
            ("--budget", BUDGET),
        ],
    ),
    ("predict",): (
        [MODEL, CONFIGS],
        [("-o", _out()), ("--alpha", _number(["0.1"], ["2", "-1", "nan"]))],
    ),
    ("screen",): (
        [SPACE],
        [
            ("--source", MODEL),
            ("--target", MODEL),
            ("--top-k", _number(["2", "5"], ["0", "-1", "x"])),
            ("--budget", BUDGET),
            ("--confidence", CONF),
            ("--json", None),
            ("-o", _out()),
        ],
    ),
    ("search",): (
        [SPACE],
        [
            ("--model", MODEL),
            ("--budget", BUDGET),
            ("--no-validate", None),
            ("--trials", _number(["40"], ["0", "-5", "x"])),
            ("--pop-size", _number(["8"], ["0", "-3", "1", "x"])),
            ("--backend", _choice(["pymoo", "optuna"], ["nope"])),
            ("--seed", SEED),
            ("--json", None),
            ("--confidence", CONF),
            ("--report", _outdir()),
        ],
    ),
    ("validate",): (
        [_files("configs.csv")],
        [
            ("--model", MODEL),
            ("--budget", BUDGET),
            ("--max-configs", _number(["1"], ["0", "-1", "x"])),
            (
                "--append",
                _choice(["rows.csv"], ["rows_ort.csv", "torn.csv", "/proc/x/r.csv", "a_dir"]),
            ),
            ("--report", _outdir()),
            ("--json", None),
            ("--threads", _number(["1"], ["0", "1000", "x"])),
        ],
    ),
    ("calibrate",): (  # a valid case would measure for a minute: every case has a bad slot
        [_choice(["cpu/torch/fp32"], ["cuda/torch/fp16", "gpu/x", "cpu/torch/fp16", ""])],
        [
            ("--time-budget-s", _number(["60"], ["1", "0", "-5", "nan", "inf", "x"])),
            ("--json", None),
        ],
    ),
    ("report", "characterize"): ([ROWS], [("--json", None), ("--report", _outdir())]),
    ("published", "evaluate"): (
        [
            _choice(
                ["published/rtx3090/amp-nchw-pt113-cu117"],
                ["published/rtx9090", "cpu/torch/fp32", "", "published/", "rows.csv"],
            )
        ],
        [
            ("--folds", _number(["2"], ["1", "0", "x", ""])),
            ("--preset", _choice(["fast"], ["paper", ""])),
            ("--seed", SEED),
            ("--json", None),
        ],
    ),
    ("published", "screen"): (
        [],
        [
            ("--source", _choice(["published/rtx4090"], ["published/rtx9090", "rows.csv", ""])),
            ("--target", _choice(["published/rtx3090"], ["cpu/torch/fp32", "published/tpu"])),
            ("--top-k", _number(["50"], ["0", "-1", "x"])),
            (
                "--budget",
                _choice(
                    ["latency_ms_per_image=0.2"],
                    ["peak_mem_mb=100", "energy_j=1", "latency_ms=-1", "latency=5", "x=1"],
                ),
            ),
            ("--quality", _choice(["imagenet"], ["missing.csv", "rows.csv", "a_dir", ""])),
            ("--folds", _number(["2"], ["1", "x"])),
            ("-o", _out()),
            ("--json", None),
        ],
    ),
    ("loadgen",): (  # every case has a bad slot (make_case), so none measures
        [CONFIGS],
        [
            ("--scenario", _choice(["single-stream", "offline"], ["server", "", "x"])),
            ("--runtime", _choice(["torch", "onnxruntime"], ["tensorrt", "", "openvino2"])),
            ("--precision", _choice(["fp32"], ["fp64", "int4", ""])),
            ("-o", _outdir()),
            ("--quick", None),
            ("--min-duration-ms", _number(["100"], ["-1", "x", "1.5"])),
            ("--samples-per-query", _number(["8"], ["0", "-2", "x", "3"])),
            ("--quantization-data", _choice(["missing.npy"], ["rows.csv", "a_dir"])),
            ("--threads", _number(["1"], ["0", "1000", "x"])),
            ("--json", None),
        ],
    ),
    ("report", "transfer"): (
        [ROWS, _files("rows_ort.csv")],
        [
            ("--json", None),
            ("--report", _outdir()),
            ("--few-shot", _choice(["10"], ["100000", "0", "-1", "x"])),
            ("--repeats", _number(["1"], ["0", "-1", "x"])),
        ],
    ),
    ("profile",): (
        [_files("configs.csv")],
        [
            ("-o", _outdir()),
            ("--max-configs", _number(["1"], ["0", "-1", "x"])),
            ("--threads", _number(["1"], ["0", "1000", "x"])),
            ("--meter", _choice(["none"], ["bogus", "nvml"])),
            ("--max-attempts", _number(["2"], ["0", "-1"])),
            ("--time-cap-s", _number(["0.2"], ["0", "-1", "nan"])),
            ("--storage", _choice(["journal:j.log"], ["bogus://", "sqlite:///no/such/dir/x.db"])),
            ("--no-progress", None),
            ("--json", None),
        ],
    ),
}


def make_case(rng: random.Random, verb: tuple[str, ...]) -> list[str]:
    positional, options = VERBS[verb]
    slots = [("pos", s) for s in positional] + [
        (flag, s) for flag, s in options if s is None or rng.random() < 0.5
    ]
    valued = [i for i, (_, s) in enumerate(slots) if s is not None]
    bad = set(rng.sample(valued, k=min(len(valued), rng.choice([1, 1, 2])))) if valued else set()
    args = list(verb)
    for i, (flag, slot) in enumerate(slots):
        if slot is None:
            args.append(flag)
            continue
        value = slot(rng, i not in bad)
        args += [value] if flag == "pos" else [flag, value]
    return args


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for p in root.rglob("*"):
        rel = str(p.relative_to(root))
        out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _campaign(env: Env, work: Path) -> None:
    """A real (tiny) campaign directory, made once and copied into each working directory."""
    src = env.root / "campaign"
    if not src.exists():
        res = CliRunner().invoke(
            cli,
            [
                "profile",
                str(env.root / "configs.csv"),
                "-o",
                str(src),
                "--max-configs",
                "1",
                "--threads",
                "1",
                "--meter",
                "none",
                "--no-progress",
                "--time-cap-s",
                "0.2",
            ],
        )
        assert res.exit_code == 0, res.output
    shutil.copytree(src, work / "campaign")


def run_case(env: Env, args: list[str], work: Path) -> tuple[int, str | None]:
    """The exit code, and None if the call kept the contract, else what it broke."""
    for p in env.root.iterdir():
        if p.name not in ("campaign", "model_ort"):
            (shutil.copytree if p.is_dir() else shutil.copy2)(p, work / p.name)
    _campaign(env, work)
    before = _snapshot(work)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        mp = _as_if_shipped(env)
        try:
            res = CliRunner().invoke(cli, args)
        finally:
            mp.undo()
    finally:
        os.chdir(cwd)
    after = _snapshot(work)
    return res.exit_code, _problem(res, before, after, _outputs(args))


#: options whose value a successful command may write (an output, a report, an appended dataset)
OUTPUT_FLAGS = ("-o", "--output", "--report", "--append")


def _outputs(args: list[str]) -> set[str]:
    return {v for flag, v in zip(args, args[1:]) if flag in OUTPUT_FLAGS}


def _problem(res, before: dict[str, str], after: dict[str, str], outputs: set[str]) -> str | None:
    if res.exit_code not in (0, 1):
        return f"exit code {res.exit_code}: {res.output[-500:]}"
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return f"traceback: {type(res.exception).__name__}: {res.exception}"
    if "Traceback (most recent call last)" in res.output:
        return f"traceback in output: {res.output[-500:]}"
    may_change = outputs if res.exit_code == 0 else set()
    changed = [
        k for k, v in before.items() if after.get(k) != v and k.split("/")[0] not in may_change
    ]
    if changed:
        return f"input changed: {changed}"
    if res.exit_code == 1:
        lines = res.stderr.strip().splitlines()
        if not lines or not lines[-1].startswith("error: "):
            return f"exit 1 without an error line: {res.stderr[-300:]!r}"
        left = sorted(set(after) - set(before))
        if left:
            return f"failed but left {left}: {lines[-1]}"
    return None


def _cases(seed: int, verb: tuple[str, ...], n: int) -> list[list[str]]:
    rng = random.Random(f"{seed}:{' '.join(verb)}")
    return [make_case(rng, verb) for _ in range(n)]


def _run_all(env: Env, tmp_path: Path, cases: list[list[str]]) -> dict[int, int]:
    broken = []
    codes: dict[int, int] = {}
    for i, args in enumerate(cases):
        work = tmp_path / f"case{i}"
        work.mkdir()
        code, problem = run_case(env, args, work)
        codes[code] = codes.get(code, 0) + 1
        if problem:
            broken.append(f"carb-nas {' '.join(args)}\n    -> {problem}")
        shutil.rmtree(work, ignore_errors=True)
    assert not broken, f"{len(broken)} of {len(cases)} cases broke the contract:\n" + "\n".join(
        broken[:25]
    )
    print(f"fuzz: {len(cases)} cases, exit codes {dict(sorted(codes.items()))}")
    return codes


def _has_values(verb: tuple[str, ...]) -> bool:
    positional, options = VERBS[verb]
    return bool(positional) or any(slot is not None for _, slot in options)


VERB_IDS = [" ".join(v) for v in sorted(VERBS)]


@pytest.mark.parametrize("verb", sorted(VERBS), ids=VERB_IDS)
def test_fuzz_cli(fuzz_env: Env, tmp_path: Path, verb: tuple[str, ...]) -> None:
    codes = _run_all(fuzz_env, tmp_path, _cases(0, verb, FUZZ_CASES_FAST))
    if _has_values(verb):
        assert codes.get(1, 0) > 0  # the malformed slots did reach the error paths


@pytest.mark.slow
@pytest.mark.parametrize("verb", sorted(VERBS), ids=VERB_IDS)
def test_fuzz_cli_many(fuzz_env: Env, tmp_path: Path, verb: tuple[str, ...]) -> None:
    _run_all(fuzz_env, tmp_path, _cases(1, verb, FUZZ_CASES_SLOW))


def test_every_verb_of_the_cli_is_fuzzed() -> None:
    def verbs(group, prefix=()):
        for name, cmd in group.commands.items():
            if hasattr(cmd, "commands"):
                yield from verbs(cmd, (*prefix, name))
            else:
                yield (*prefix, name)

    assert set(verbs(cli)) == set(VERBS)
