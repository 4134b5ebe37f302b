"""OpenCL drivers installed by pip, made visible to the ICD loader without root.

The ICD loader finds drivers through the ``.icd`` files of ``/etc/OpenCL/vendors``, or
of the folder ``OCL_ICD_VENDORS`` names. pip cannot write there, and the ``.icd`` file of
Intel's CPU runtime on PyPI (``intel-opencl-rt``) names a placeholder prefix of the
machine it was built on. So before the first platform query dlprim writes a vendors
folder of its own, in its cache: a copy of every ``.icd`` file the loader would have read
(a GPU's driver stays visible) and one that names each pip-installed driver library by
its absolute path; then ``OCL_ICD_VENDORS`` points there. pyopencl's bundled loader finds
pip's PoCL by itself in any case.

Why Intel's runtime at all: pip's PoCL (3.0, LLVM 14) asks LLVM for the host CPU's name,
and on CPUs newer than LLVM 14 it gets ``generic``, which it then cannot target: no
kernel builds. Intel's runtime compiles for any x86-64 CPU (AMD's included).

``DLPRIM_PIP_DRIVERS=0`` leaves the loader as it is.
"""
import hashlib
import logging
import os
import sys
import tempfile

from ..utils import cache_dir

__all__ = ["register_pip_drivers", "pip_driver_libraries", "loader_vendors", "icd_files",
           "PIP_DRIVERS", "DEFAULT_VENDORS"]

log = logging.getLogger(__name__)

# distribution -> (its driver library, the libraries it needs from another distribution)
PIP_DRIVERS = {"intel-opencl-rt": ("libintelocl.so", {"libimf.so": "intel-cmplr-lib-rt"})}

DEFAULT_VENDORS = "/etc/OpenCL/vendors"  # where the loader reads without OCL_ICD_VENDORS
_registered = None  # the vendors folder set in this process, once decided
_original = None  # what OCL_ICD_VENDORS said before it was set here


def loader_vendors():
    """Where the ICD loader reads ``.icd`` files, in the user's terms: the folder (or file)
    of OCL_ICD_VENDORS before dlprim pointed it at its own copy, else the default."""
    if _registered:
        return _original or DEFAULT_VENDORS
    return os.environ.get("OCL_ICD_VENDORS") or DEFAULT_VENDORS


def icd_files(where):
    """The ``.icd`` files the loader reads from ``where``: the file itself (OCL_ICD_VENDORS
    may name one), or those of the folder, sorted; none where it cannot be read."""
    if os.path.isfile(where):
        return [where]
    try:
        return sorted(os.path.join(where, f) for f in os.listdir(where) if f.endswith(".icd"))
    except OSError:
        return []


def _installed_file(distribution, filename):
    """Absolute path of ``filename`` installed by ``distribution``, or None."""
    try:
        from importlib import metadata
        files = metadata.files(distribution) or []
    except Exception:  # not installed, or metadata without a file list
        files = []
    for f in files:
        if os.path.basename(str(f)) == filename:
            path = os.path.realpath(str(f.locate()))
            if os.path.isfile(path):
                return path
    # wheels that install into <prefix>/lib (data files) without a RECORD entry we can read
    path = os.path.join(sys.prefix, "lib", filename)
    return os.path.realpath(path) if os.path.isfile(path) else None


def pip_driver_libraries():
    """{distribution: absolute path of its driver library} for the pip drivers installed
    whole (with the libraries they load); a part missing is logged with its fix."""
    found = {}
    for dist, (library, needs) in PIP_DRIVERS.items():
        path = _installed_file(dist, library)
        if path is None:
            continue
        folder = os.path.dirname(path)
        missing = [(lib, owner) for lib, owner in needs.items()
                   if not os.path.exists(os.path.join(folder, lib))]
        if missing:
            log.warning("%s is installed but %s is missing beside %s: pip install %s",
                        dist, ", ".join(m[0] for m in missing), path,
                        " ".join(sorted({m[1] for m in missing})))
            continue
        found[dist] = path
    return found


def _vendor_entries():
    """(where the loader reads, {file name: content}) of the ``.icd`` files it would read."""
    where = loader_vendors()
    entries = {}
    for path in icd_files(where):
        try:
            with open(path) as f:
                entries[os.path.basename(path)] = f.read().strip()
        except OSError:
            continue
    return where, entries


def _write_folder(entries, root):
    """A vendors folder holding ``entries`` under ``root``, named by its content; written
    to a temporary folder and renamed, so a reader never sees half of it."""
    digest = hashlib.sha256(repr(sorted(entries.items())).encode()).hexdigest()[:16]
    base = os.path.join(root, "opencl-vendors")
    folder = os.path.join(base, digest)
    if os.path.isdir(folder):
        return folder
    os.makedirs(base, exist_ok=True)
    tmp = "%s.tmp-%d" % (folder, os.getpid())
    os.makedirs(tmp, exist_ok=True)
    for name, content in entries.items():
        with open(os.path.join(tmp, name), "w") as f:
            f.write(content + "\n")
    try:
        os.rename(tmp, folder)
    except OSError:  # another process published the same folder first
        for name in os.listdir(tmp):
            os.unlink(os.path.join(tmp, name))
        os.rmdir(tmp)
    return folder


def register_pip_drivers():
    """Make pip-installed OpenCL drivers visible to the ICD loader of this process (and of
    the processes it starts). Call before the first platform query; later it cannot
    change what the loader has read. Returns the vendors folder set, or None."""
    global _registered, _original
    if _registered is not None:
        return _registered or None
    _registered = ""
    if os.environ.get("DLPRIM_PIP_DRIVERS", "1").strip() == "0":
        return None
    libraries = pip_driver_libraries()
    if not libraries:
        return None
    where, entries = _vendor_entries()
    named = " ".join(entries.values())
    added = {"dlprim-%s.icd" % dist: path for dist, path in libraries.items()
             if os.path.basename(path) not in named}
    if not added:
        return None
    entries.update(added)
    folder, errors = None, []
    # the cache, else the temporary folder (a read-only home must not cost the driver)
    for root in (cache_dir(), os.path.join(tempfile.gettempdir(), "dlprim-%d" % os.getuid())):
        try:
            folder = _write_folder(entries, root)
            break
        except OSError as err:
            errors.append(str(err))
    if folder is None:
        log.warning("cannot register pip's OpenCL drivers (%s): %s", ", ".join(added),
                    "; ".join(errors))
        return None
    _original = os.environ.get("OCL_ICD_VENDORS")
    os.environ["OCL_ICD_VENDORS"] = folder
    _registered = folder
    log.debug("OpenCL vendors: %s (the drivers of %s, and %s)", folder, where, ", ".join(added))
    return folder
