"""Console scripts: dlprim-devices (and later dlprim-train, dlprim-benchmark)."""
