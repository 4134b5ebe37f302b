"""dlprim-devices: every OpenCL platform and device, with the string that selects it."""
import argparse
import sys

from ..context import (DeviceError, DeviceFacts, compile_problem, default_device_string,
                       list_devices)


def _mib(n):
    return "%d MiB" % (n // (1 << 20)) if n >= (1 << 20) else "%d KiB" % (n // 1024)


def rows():
    """One dict per OpenCL device: the table's columns as strings."""
    try:
        default = default_device_string()
    except DeviceError:  # no device compiles: the table still shows each one and why
        default = None
    out = []
    for entry in list_devices():
        p, d, platform, device = entry
        f = DeviceFacts(device)
        problem = compile_problem(entry)
        key = "%d:%d" % (p, d)
        out.append({
            "device": key, "default": "*" if key == default else "",
            "name": f.name, "platform": platform.name.strip(), "type": f.type,
            "units": str(f.compute_units), "memory": _mib(f.global_mem),
            "local": _mib(f.local_mem), "opencl": f.opencl_c_version.replace("OpenCL C ", ""),
            "fp16": "yes" if f.fp16 else "no", "fp64": "yes" if f.fp64 else "no",
            "compiles": "yes" if problem is None else "NO", "problem": problem or "",
        })
    return out


def format_table(table):
    """The rows as an aligned text table with a header."""
    cols = ["default", "device", "name", "platform", "type", "units", "memory", "local",
            "opencl", "fp16", "fp64", "compiles"]
    width = {c: max(len(c), *(len(r[c]) for r in table)) for c in cols}
    lines = ["  ".join(c.ljust(width[c]) for c in cols)]
    lines.append("  ".join("-" * width[c] for c in cols))
    for r in table:
        lines.append("  ".join(r[c].ljust(width[c]) for c in cols).rstrip())
    for r in table:
        if r["problem"]:
            lines.append("\n" + r["problem"])
    return "\n".join(lines)


def main(argv=None):
    """The dlprim-devices program; returns the exit status."""
    parser = argparse.ArgumentParser(prog="dlprim-devices", description=__doc__)
    parser.parse_args(argv)
    try:
        table = rows()
    except DeviceError as err:
        print("dlprim-devices: %s" % err, file=sys.stderr)
        return 1
    print(format_table(table))
    print("\n* = default (DLPRIM_DEVICE, else the first GPU, else the first CPU; a device "
          "that cannot compile is never chosen). Select with Context('P:D'), 'cpu', 'gpu' "
          "or an index.")
    return 0 if any(r["compiles"] == "yes" for r in table) else 1


if __name__ == "__main__":
    sys.exit(main())
