"""The notebooks of examples/notebooks run top to bottom in a Jupyter kernel (nbclient),
each within the time limit, and are committed as tools/make_notebooks.py writes them from
examples/notebooks/src (so without outputs)."""
import importlib.util
import json
import os
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "examples", "notebooks")
NAMES = sorted(f[:-6] for f in os.listdir(NOTEBOOKS) if f.endswith(".ipynb"))
TIME_LIMIT = 120  # seconds per notebook, on a 2-core CPU through PoCL
REQUIRES = {"03_onnx": ["onnx", "onnxruntime"]}  # optional packages a notebook needs
# notebooks with a path for machines without PyTorch: run them that way as well
WITHOUT_TORCH = ["03_onnx"]


def _generator():
    spec = importlib.util.spec_from_file_location(
        "make_notebooks", os.path.join(ROOT, "tools", "make_notebooks.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_notebooks_are_generated_from_their_sources_without_outputs():
    gen = _generator()
    sources = sorted(f[:-3] for f in os.listdir(gen.SOURCES) if f.endswith(".py"))
    assert sources == NAMES and len(NAMES) >= 4, (sources, NAMES)
    for name in NAMES:
        path, text = gen.render(os.path.join(gen.SOURCES, name + ".py"))
        with open(path) as f:
            assert f.read() == text, "%s is out of date: run tools/make_notebooks.py" % path
        cells = json.loads(text)["cells"]
        assert cells[0]["cell_type"] == "markdown" and cells[0]["source"][0].startswith("# ")
        assert all(c["outputs"] == [] for c in cells if c["cell_type"] == "code")


def test_generator_parses_cells():
    cells = _generator().parse("# %% [markdown]\n# # Title\n#\n# text\n\n# %%\nx = 1\n\n\n"
                               "# %%\n\nprint(x)\n")
    assert cells == [("markdown", "# Title\n\ntext"), ("code", "x = 1"), ("code", "print(x)")]


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """A kernelspec running this interpreter, with dlprim importable from the source tree
    and the test device as the default device."""
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    spec_dir = tmp_path / "jupyter" / "kernels" / "dlprim-test"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "dlprim tests", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    device = os.environ.get("DLPRIM_TEST_DEVICE")
    if device:
        monkeypatch.setenv("DLPRIM_DEVICE", device)
    return "dlprim-test"


@pytest.mark.parametrize("name,hide_torch", [(n, False) for n in NAMES] +
                         [(n, True) for n in WITHOUT_TORCH if n in NAMES])
def test_notebook_runs(name, hide_torch, kernel, tmp_path):
    import nbformat
    from nbclient import NotebookClient
    for module in REQUIRES.get(name, []):
        pytest.importorskip(module)
    # run in a copy of the layout so that the files a notebook writes stay out of the tree
    work = tmp_path / "examples" / "notebooks"
    work.mkdir(parents=True)
    for data in ("mnist", "charlm"):
        os.symlink(os.path.join(ROOT, "examples", data), str(tmp_path / "examples" / data))
    nb = nbformat.read(os.path.join(NOTEBOOKS, name + ".ipynb"), as_version=4)
    if hide_torch:  # "import torch" raises ImportError
        nb.cells.insert(0, nbformat.v4.new_code_cell('import sys; sys.modules["torch"] = None'))
    client = NotebookClient(nb, timeout=TIME_LIMIT, kernel_name=kernel,
                            resources={"metadata": {"path": str(work)}})
    started = time.perf_counter()
    client.execute()  # a failing cell raises CellExecutionError with its traceback
    seconds = time.perf_counter() - started
    assert seconds < TIME_LIMIT, "%s took %.0f s" % (name, seconds)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    draws = any("plt." in c.source or "training_curves" in c.source for c in nb.cells)
    if draws:  # figures reach the notebook as images
        assert any("image/png" in o.get("data", {}) for o in outputs), name
