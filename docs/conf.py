"""Sphinx configuration for the kopf documentation: `sphinx-build -W -b html docs docs/_build/html`."""
project = 'kopf'
author = 'the kopf authors'
copyright = '2026, the kopf authors'
extensions = ['sphinx.ext.autodoc']
master_doc = 'index'
exclude_patterns = ['_build']
html_theme = 'alabaster'
html_title = 'kopf: Kubernetes operators in Python'
# References to the API (:class:`kopf.Body`, ...) are kept as plain text when no target exists.
nitpicky = False
