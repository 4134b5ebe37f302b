"""ATen operators on ocl devices generated from the operator library (dlprim.ops)."""
