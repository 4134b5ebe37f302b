"""OpenCL drivers: the ones pip installs, made visible without root (``pip_icd``), and
the probe that tells whether a device can build a kernel at all (``probe``), which
``Context`` and ``dlprim-devices`` ask before choosing a device."""
from .pip_icd import icd_files, loader_vendors, pip_driver_libraries, register_pip_drivers
from .probe import ProbeResult, probe_device, advice

__all__ = ["register_pip_drivers", "pip_driver_libraries", "loader_vendors", "icd_files",
           "ProbeResult", "probe_device", "advice"]
