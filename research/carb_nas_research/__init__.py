"""Research code of carb_nas: studies and sweeps the benchmarks run, not shipped."""
