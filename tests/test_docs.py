"""The documentation is checked rather than built:

- every ```python block of README.md and docs/*.md that a ``<!-- runnable -->`` line
  precedes runs (a file's blocks in order, sharing one namespace as a reader would, in a
  temporary directory that sees the repository's examples/, on the test device);
- relative links in README.md, docs/ and examples/ point to files, and #anchors to
  headings, that exist;
- docs/operators.md has a section for every registered operator type listing each of
  its options (and the values of the options that choose a function).
"""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNABLE = "<!-- runnable -->"
PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
LINKED = PAGES + sorted(glob.glob(os.path.join(ROOT, "examples", "**", "*.md"), recursive=True))

_FENCE = re.compile(r"^```(\w*)\s*$")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def rel(path):
    return os.path.relpath(path, ROOT)


def code_blocks(text):
    """[(first line number, language, runnable, source)] of the fenced blocks in text."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        runnable = i > 0 and lines[i - 1].strip() == RUNNABLE
        blocks.append((i + 2, m.group(1), runnable, "\n".join(lines[i + 1:j])))
        i = j + 1
    return blocks


def test_code_blocks_parse_and_the_marker_sits_on_python():
    text = "a\n<!-- runnable -->\n```python\nx = 1\n```\n```bash\nls\n```\n```python\ny\n```\n"
    assert code_blocks(text) == [(4, "python", True, "x = 1"), (7, "bash", False, "ls"),
                                 (10, "python", False, "y")]
    for page in PAGES:
        text = open(page).read()
        lines = text.splitlines()
        for n, line in enumerate(lines):
            if line.strip() == RUNNABLE:
                assert n + 1 < len(lines) and lines[n + 1].strip() == "```python", \
                    "%s:%d: %s must stand right before a ```python fence" % (rel(page), n + 1, RUNNABLE)


RUN_PAGES = [p for p in PAGES if RUNNABLE in open(p).read()]
# packages a page may use that a plain install lacks: without them its examples skip
OPTIONAL = {"torch", "onnx", "onnxruntime", "h5py", "matplotlib", "PIL", "IPython"}


def test_the_pages_a_new_user_follows_have_runnable_examples():
    assert {"README.md", "docs/getting-started.md", "docs/python-api.md",
            "docs/architecture.md"} <= {rel(p) for p in RUN_PAGES}


@pytest.mark.parametrize("page", [rel(p) for p in RUN_PAGES])
def test_runnable_examples_run(page, tmp_path, monkeypatch):
    blocks = [(line, src) for line, lang, runnable, src in code_blocks(open(os.path.join(ROOT, page)).read())
              if runnable]
    assert blocks
    os.symlink(os.path.join(ROOT, "examples"), str(tmp_path / "examples"))
    monkeypatch.chdir(tmp_path)
    device = os.environ.get("DLPRIM_TEST_DEVICE")
    if device:
        monkeypatch.setenv("DLPRIM_DEVICE", device)
    from dlprim.layers.base import REGISTRY
    registered = dict(REGISTRY)  # a page may register an example layer: forget it after
    namespace = {"__name__": "__docs__"}
    try:
        for line, src in blocks:
            try:
                exec(compile(src, "%s:%d" % (page, line), "exec"), namespace)
            except ModuleNotFoundError as err:
                if (err.name or "").split(".")[0] not in OPTIONAL:
                    raise
                pytest.skip("%s, the block at line %d needs %s (an optional package)"
                            % (page, line, err.name))
            except Exception as err:
                raise AssertionError("%s, the block at line %d failed: %s: %s"
                                     % (page, line, type(err).__name__, err)) from err
    finally:
        REGISTRY.clear()
        REGISTRY.update(registered)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"`|\*\*|\[|\]\([^)]*\)", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    text = re.sub(r"^```.*?^```", "", open(path).read(), flags=re.M | re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, flags=re.M)}


def test_slug_follows_github():
    assert slug("3. Choosing a device") == "3-choosing-a-device"
    assert slug("`net.path` and friends") == "netpath-and-friends"
    assert slug("How to add a layer") == "how-to-add-a-layer"


def test_relative_links_resolve():
    broken = []
    for page in LINKED:
        text = re.sub(r"^```.*?^```", "", open(page).read(), flags=re.M | re.S)
        for target in _LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(full):
                broken.append("%s: %s (no such file)" % (rel(page), target))
            elif anchor and full.endswith(".md") and anchor not in anchors(full):
                broken.append("%s: %s (no such heading)" % (rel(page), target))
    assert not broken, "\n".join(broken)


def _sections(path):
    text = open(path).read()
    return {part.split("\n", 1)[0].strip(): part for part in re.split(r"^## ", text, flags=re.M)[1:]}


def test_operators_page_documents_every_operator_and_option():
    from dlprim.core.activation import ACTIVATIONS
    from dlprim.layers import elementwise, reduction
    from dlprim.layers.base import REGISTRY
    sections = _sections(os.path.join(ROOT, "docs", "operators.md"))
    problems = []
    for type_name, cls in sorted(REGISTRY.items()):
        if not cls.__module__.startswith("dlprim."):
            continue  # layers that tests register for themselves
        section = sections.get(type_name)
        if section is None:
            problems.append("no '## %s' section" % type_name)
            continue
        same = re.search(r"Same options as (\w+)", section)
        text = section + (sections.get(same.group(1), "") if same else "")
        problems += ["%s: option `%s` is not documented" % (type_name, opt)
                     for opt in getattr(cls, "OPTIONS", {}) if "`%s`" % opt not in text]
    values = [("Activation", ACTIVATIONS), ("Elementwise", elementwise.FORWARD),
              ("Reduction", reduction.METHODS)]
    for type_name, names in values:
        problems += ["%s: `%s` is not documented" % (type_name, v) for v in names
                     if "`%s`" % v not in sections.get(type_name, "")]
    assert not problems, "\n".join(problems)
