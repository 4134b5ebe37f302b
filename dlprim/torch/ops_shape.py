"""ATen operators on ocl devices: ops_shape."""
