"""Metadata lives in setup.cfg. This file only supplies the long description: README.md
with its relative links made absolute against the source repository, because a package
index page shows the README away from the files those links name."""
import configparser
import os
import re

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))

# [text](target): a target with no scheme and not a bare #anchor is relative
_RELATIVE = re.compile(r"\]\((?![a-zA-Z][a-zA-Z0-9+.-]*:|#)([^)\s]+)\)")


def absolute_links(text, base):
    """``text`` with every relative Markdown link target prefixed by ``base``."""
    return _RELATIVE.sub(lambda m: "](%s%s)" % (base, m.group(1).lstrip("./")), text)


def long_description():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(HERE, "setup.cfg"))
    source = cfg["metadata"]["url"].rstrip("/")
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        return absolute_links(f.read(), source + "/blob/main/")


setup(long_description=long_description(), long_description_content_type="text/markdown")
