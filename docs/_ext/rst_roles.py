"""A griffe extension for the API pages: Sphinx roles in docstrings become Markdown code.

twinfer's docstrings name other objects with Sphinx roles (``:func:`run```,
``:class:`~twinfer.infer.Estimate```), which Markdown shows literally. This rewrites each role to a
code span of its target (the last component after ``~``, as Sphinx shows it) when mkdocstrings reads
the docstrings; the source files are not changed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|obj|exc|const|ref):`(~?)([^`]+)`")


def _code(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


class SphinxRoles(griffe.Extension):
    """Rewrite ``:role:`target``` in every docstring to a Markdown code span."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_code, obj.docstring.value)
