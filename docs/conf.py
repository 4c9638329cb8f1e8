"""Sphinx configuration of sb3-impact's documentation (``sphinx-build -W -b html docs docs/_build``).

The pages are Markdown (MyST); each algorithm page's Parameters section is the class docstring, pulled in by
autodoc, so the parameters are written once, in the code.
"""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "sb3-impact"
author = "sb3-impact contributors"
with open(os.path.join(os.path.dirname(__file__), "..", "sb3_impact", "version.txt")) as version_file:
    release = version_file.read().strip()
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
# Raw benchmark files (CSV, JSON, PNG) are linked from the pages, not pages themselves.
exclude_patterns = ["_build", "benchmarks"]

myst_heading_anchors = 4
# dollarmath: $...$ and $$...$$ math (guide/equations.md), rendered by MathJax.
myst_enable_extensions = ["colon_fence", "dollarmath"]
# Pages link to repository files that are not pages (benchmark CSVs, recipes, source files): they are plain
# links on GitHub, and tests/test_docs.py checks that each one exists. Links between pages are still checked.
suppress_warnings = ["myst.xref_missing"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}  # each page lists :members: and :inherited-members:
add_module_names = False

html_theme = "alabaster"
html_title = f"sb3-impact {release}"
