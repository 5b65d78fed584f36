"""MkDocs hook: Sphinx roles in docstrings shown as code.

shardvol's docstrings use reST roles (``:class:`~shardvol.x.Volume```); mkdocstrings renders
them as Markdown, leaving ``:class:<code>~shardvol.x.Volume</code>``.  This drops the role
and, as Sphinx does for ``~``, keeps the last component of the name.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(
    r":(?:py:)?(?:class|meth|func|attr|mod|data|exc|obj|const):<code>(~?)([^<]*)</code>")


def _code(m: re.Match[str]) -> str:
    name = m.group(2)
    return f"<code>{name.rsplit('.', 1)[-1] if m.group(1) else name}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub(_code, html)
