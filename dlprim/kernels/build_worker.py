"""Building one program from its source, in this process or in a worker process.

``build(cl_context, source, options)`` is the one way dlprim turns a rendered template
into a program (``program.get`` calls it). Run as a script (``python build_worker.py
PLATFORM DEVICE``), this file is a worker of ``build_ahead``: it opens a context on the
platform's device of that index and builds each source it is sent. It reads one JSON
request a line on stdin (``{"source": ..., "options": [...]}``) and answers one JSON
line on stdout (``{"ok": true}``, or ``{"ok": false, "error": ...}``). What it builds is
kept by PyOpenCL's binary cache and the driver's own (NVIDIA's compute cache), which is
how the parent's build of the same source later takes the warm path.

It imports nothing of dlprim, so that a worker starts in the time pyopencl takes.
"""
import json
import os
import re
import sys

import pyopencl as cl

# Instructions of NVIDIA's sm_90a (Hopper's wgmma) that the OpenCL compiler's sm_90 target
# refuses are written in inline PTX behind this comment marker (kernels/wgmma.h); such a
# program is built once as it is, then again from its PTX with the marker removed and the
# target raised to sm_90a (the driver takes PTX as a program binary).
SM90A = "//SM90A "


class TargetError(Exception):
    """A program's instructions need a device target this one is not."""


def sm90a_ptx(ptx):
    """The PTX of a program built for sm_90 with its SM90A-marked instructions unmarked and
    its target raised to sm_90a; TargetError where it was built for another target."""
    if not re.search(r"^\.target sm_90\b", ptx, re.M):
        raise TargetError("its sm_90a instructions need a device of NVIDIA's sm_90 target")
    return re.sub(r"^\.target sm_90\b", ".target sm_90a", ptx.replace(SM90A, ""), flags=re.M)


def build(cl_context, source, options):
    """A built ``pyopencl.Program`` of ``source`` (through PyOpenCL's binary cache)."""
    program = cl.Program(cl_context, source).build(options=options)
    if SM90A not in source:
        return program
    ptx = sm90a_ptx(program.binaries[0].decode(errors="replace"))
    return cl.Program(cl_context, cl_context.devices, [ptx.encode()]).build(options=options)


def device_address(device):
    """(platform index, device index) of ``device`` among ``cl.get_platforms()``: what a
    worker, which sees the same platforms, opens."""
    for p, platform in enumerate(cl.get_platforms()):
        for d, other in enumerate(platform.get_devices()):
            if other.int_ptr == device.int_ptr:
                return p, d
    raise LookupError("device %r is on no platform this process lists" % device.name)


def serve(platform_index, device_index, requests=sys.stdin, replies=sys.stdout):
    """Build each requested source on that device until the requests end."""
    device = cl.get_platforms()[platform_index].get_devices()[device_index]
    cl_context = cl.Context([device])
    for line in requests:
        request = json.loads(line)
        try:
            build(cl_context, request["source"], request["options"])
            reply = {"ok": True}
        except Exception as err:  # the parent builds it again itself and reports the error
            reply = {"ok": False, "error": "%s: %s" % (type(err).__name__, err)}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    # replies on a copy of stdout; whatever a driver prints goes to stderr instead
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    serve(int(sys.argv[1]), int(sys.argv[2]), replies=replies)
