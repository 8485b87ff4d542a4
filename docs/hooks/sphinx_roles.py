"""mkdocs hook: Sphinx roles in Markdown pages (``:func:`x```, ``:mod:`~a.b```, written in
docs/algorithms/*.md, whose text follows the module docstrings) render as code spans, outside
fenced code blocks. The files keep their text."""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj|exc|const):`~?([^`]+)`")


def convert(markdown: str) -> str:
    out, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        out.append(line if fenced else _ROLE.sub(r"``\1``", line))
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return convert(markdown)
