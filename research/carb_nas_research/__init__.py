"""Research code built on carb_nas, outside the shipped package: methods that were tried and
did not earn a place in the product, kept so their benchmarks can be re-run."""
