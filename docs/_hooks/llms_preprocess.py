"""The Markdown twins' preprocessing (mkdocs-llmstxt's ``preprocess``): a ``|`` in a
table cell is escaped, as a Markdown table needs it. markdownify writes a cell's text as
it is, so a choice list's ``[latest|all|skip]`` split its row into cells and the row's
description and default fell off the end (the CLI reference's twin and llms-full.txt)."""

from __future__ import annotations

from typing import Any


def preprocess(soup: Any, output: str) -> None:
    for cell in soup.find_all(["td", "th"]):
        for text in list(cell.find_all(string=True)):
            if "|" in text:
                text.replace_with(text.replace("|", "\\|"))
