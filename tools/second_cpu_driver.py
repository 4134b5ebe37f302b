"""Prints the "P:D" string of a CPU device that compiles on another OpenCL platform than
dlprim's default device (Intel's CPU runtime beside PoCL, or PoCL beside it), or nothing
when there is none: `make test-second-driver` runs the kernel tests there."""
import pyopencl as cl

from dlprim.context import compile_problem, default_device_string, list_devices


def second_cpu_driver():
    default = default_device_string()
    entries = list_devices()
    used = next(e[2] for e in entries if "%d:%d" % e[:2] == default)
    for entry in entries:
        p, d, platform, device = entry
        if (platform.name != used.name and device.type & cl.device_type.CPU
                and compile_problem(entry) is None):
            return "%d:%d" % (p, d)
    return ""


if __name__ == "__main__":
    print(second_cpu_driver())
