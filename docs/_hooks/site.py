"""MkDocs hooks for the documentation site (#42), run by ``mkdocs build`` and ``serve``.

- A page's ``<!-- openapi: PATH -->`` line becomes the HTTP reference, rendered from
  that OpenAPI document (the tests keep ``docs/openapi.json`` equal to the live one).
- A line ``--8<-- "FILE"`` or ``--8<-- "FILE:NAME"`` is that file of the checkout, or
  its part between ``--8<-- [start:NAME]`` and ``--8<-- [end:NAME]`` marks: the README's
  promises, install and tour are one text on GitHub and on the site, and
  ``CHANGELOG.md`` is the changelog page. Links in it to ``docs/...`` (as GitHub reads
  the README) are made relative to the page that takes it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OPENAPI = re.compile(r"^<!-- openapi: (\S+) -->$", re.M)
INCLUDE = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"$', re.M)
MARK = re.compile(r"^.*--8<-- \[(?:start|end):[\w-]+\].*\n?", re.M)
METHODS = ("get", "post", "put", "patch", "delete")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    up = "../" * page.file.src_uri.count("/")  # from the page to the site's root
    markdown = INCLUDE.sub(lambda m: include(m.group(1), m.group(2), up), markdown)
    match = OPENAPI.search(markdown)
    if match:
        doc = json.loads((ROOT / match.group(1)).read_text())
        markdown = markdown[: match.start()] + render(doc) + markdown[match.end() :]
    return markdown


def include(name: str, section: str | None, up: str) -> str:
    """A file of the checkout, or its marked section, with its docs/ links made the
    page's (a missing file or section fails the build)."""
    text = (ROOT / name).read_text()
    if section is not None:
        start, end = f"--8<-- [start:{section}]", f"--8<-- [end:{section}]"
        if start not in text or end not in text:
            raise ValueError(f"{name} has no section {section!r}")
        text = text.split(start, 1)[1].split("\n", 1)[1].split(end, 1)[0]
        text = text.rsplit("\n", 1)[0]  # the end mark's line
    return MARK.sub("", text).replace("](docs/", f"]({up}").strip("\n")


def render(doc: dict[str, Any]) -> str:
    """The document's operations, grouped by path, then its schemas."""
    out: list[str] = []
    for path, ops in doc["paths"].items():
        for method in METHODS:
            op = ops.get(method)
            if op is None:
                continue
            out += [f"## `{method.upper()} {path}`", "", op.get("summary", ""), ""]
            if op.get("description"):
                out += [op["description"], ""]
            scopes = [s for req in op.get("security", []) for s in req.get("bearer", [])]
            out += [f"Token scope: `{', '.join(scopes)}`." if scopes else "No token.", ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | required | schema |", "|---|---|---|---|"]
                for p in params:
                    schema = json.dumps(p.get("schema", {}), sort_keys=True)
                    req = "yes" if p.get("required") else "no"
                    out.append(f"| `{p['name']}` | {p['in']} | {req} | `{cell(schema)}` |")
                out.append("")
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                out += ["Request body:", "", "```json", dump(body["schema"]), "```", ""]
            out += ["| status | meaning |", "|---|---|"]
            for status, resp in op.get("responses", {}).items():
                out.append(f"| {status} | {cell(resp.get('description', ''))} |")
            out.append("")
    out += ["## Schemas", ""]
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        out += [f"### `{name}`", "", "```json", dump(schema), "```", ""]
    return "\n".join(out)


def dump(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True)


def cell(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")
