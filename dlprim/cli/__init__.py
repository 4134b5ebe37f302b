"""Console scripts: dlprim-devices, dlprim-train, dlprim-benchmark, dlprim-convert, dlprim-tune."""
