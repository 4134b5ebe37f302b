"""Write examples/notebooks/*.ipynb from their sources in examples/notebooks/src/*.py.

A source is a Python file in the "percent" format: ``# %%`` starts a code cell,
``# %% [markdown]`` a Markdown cell whose lines are comments (``# `` is removed). The
notebooks are written without outputs and with stable cell ids, so regenerating an
unchanged source gives the same bytes (tests/test_notebooks.py checks that they agree).

    python3 tools/make_notebooks.py            # rewrite every notebook
    python3 tools/make_notebooks.py --check    # exit 1 if a notebook is out of date
"""
import argparse
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "examples", "notebooks")
SOURCES = os.path.join(NOTEBOOKS, "src")

METADATA = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"}}


def parse(text):
    """[(kind, source)] cells of a percent-format source."""
    cells, kind, lines = [], None, []

    def flush():
        while lines and not lines[-1].strip():
            lines.pop()
        if kind is not None and lines:
            cells.append((kind, "\n".join(lines)))

    for line in text.splitlines():
        if line.startswith("# %%"):
            flush()
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        elif kind == "markdown":
            lines.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
        elif kind == "code" and (lines or line.strip()):
            lines.append(line)
    flush()
    return cells


def notebook(text, stem):
    cells = []
    for i, (kind, source) in enumerate(parse(text)):
        cell = {"cell_type": kind, "id": "%s-%02d" % (stem[:3].rstrip("_"), i),
                "metadata": {}, "source": source.splitlines(keepends=True)}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        cells.append(cell)
    return {"cells": cells, "metadata": METADATA, "nbformat": 4, "nbformat_minor": 5}


def render(path):
    stem = os.path.splitext(os.path.basename(path))[0]
    with open(path) as f:
        nb = notebook(f.read(), stem)
    return os.path.join(NOTEBOOKS, stem + ".ipynb"), json.dumps(nb, indent=1) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only report notebooks out of date")
    args = p.parse_args(argv)
    stale = []
    for src in sorted(glob.glob(os.path.join(SOURCES, "*.py"))):
        out, text = render(src)
        old = open(out).read() if os.path.exists(out) else None
        if old == text:
            continue
        stale.append(os.path.relpath(out, ROOT))
        if not args.check:
            with open(out, "w") as f:
                f.write(text)
    for name in stale:
        print(("out of date: %s" if args.check else "wrote %s") % name)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
