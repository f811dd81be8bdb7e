"""Write the config lists of the PyTorch passes (see README, "Shipped datasets").

    python research/runs/torch_pass_configs.py campaigns/configs_3100.csv campaigns/

writes configs_3606.csv (the 3,100 stratified configs plus every other width >= 1.25 config
of search_spaces/cpu.toml, shuffled: pass 2), configs_3606_s1.csv (the same configs in
another order: pass 3) and configs_506.csv (the 506 added configs in a third order: their third
pass; pass 1, the earlier quiet pass, measured only the 3,100).
"""

import sys
from pathlib import Path

import pandas as pd

from carb_nas.space import Config, load_space


def _keys(frame: pd.DataFrame) -> list[str]:
    return [
        Config(r.family, int(r.depth), float(r.width), int(r.resolution), int(r.batch_size)).key
        for r in frame.itertuples(index=False)
    ]


def main(sample_csv: str, out_dir: str) -> None:
    sample = pd.read_csv(sample_csv)
    grid = load_space("search_spaces/cpu.toml").grid()[list(sample.columns)]
    heavy = grid[grid["width"] >= 1.25]
    added = heavy[~pd.Series(_keys(heavy), index=heavy.index).isin(set(_keys(sample)))]
    both = pd.concat([sample, added], ignore_index=True).sample(frac=1, random_state=0)
    both = both.reset_index(drop=True)
    out = Path(out_dir)
    both.to_csv(out / "configs_3606.csv", index=False)
    both.sample(frac=1, random_state=1).to_csv(out / "configs_3606_s1.csv", index=False)
    new = both[~pd.Series(_keys(both)).isin(set(_keys(sample)))]
    new.sample(frac=1, random_state=2).to_csv(out / "configs_506.csv", index=False)
    print(f"{len(sample)} sampled + {len(added)} added = {len(both)} configs")


if __name__ == "__main__":
    main(*sys.argv[1:3])
