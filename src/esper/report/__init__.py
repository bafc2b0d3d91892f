"""Reports: PNG plots of a run or dataset directory, one module per kind of run, read from its files alone."""
