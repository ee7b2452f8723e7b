"""Sphinx configuration for the celery-pause documentation.

Build: pip install -r docs/requirements.txt && sphinx-build -W -b html docs docs/_build/html
"""

from __future__ import annotations

import sys
from pathlib import Path

# Document the checkout these pages sit in, not whichever celery-pause is installed.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import celery_pause

project = "celery-pause"
author = "celery-pause developers"
copyright = "celery-pause developers"
release = celery_pause.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

# Docstrings are Google style: ``Parameters:``, ``Returns:`` and ``Raises:`` sections.
napoleon_google_docstring = True
napoleon_numpy_docstring = False

autodoc_member_order = "bysource"
autodoc_typehints = "signature"

exclude_patterns = ["_build"]

html_theme = "furo"
html_title = f"celery-pause {release}"
