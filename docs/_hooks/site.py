"""MkDocs hooks for the documentation site (#42), run by ``mkdocs build`` and ``serve``.

- A page's ``<!-- openapi: PATH -->`` line becomes the HTTP reference, rendered from
  that OpenAPI document (the tests keep ``docs/openapi.json`` equal to the live one).
- A line ``--8<-- "FILE"`` or ``--8<-- "FILE:NAME"`` is that file of the checkout, or
  its part between ``--8<-- [start:NAME]`` and ``--8<-- [end:NAME]`` marks: the README's
  promises, install and tour are one text on GitHub and on the site, and
  ``CHANGELOG.md`` is the changelog page. Links in it to ``docs/...`` (as GitHub reads
  the README) are made relative to the page that takes it.
- A line ``<!-- cli: MODULE:COMMAND PROG -->`` becomes the CLI reference, read from the
  click command itself: every command's help, usage, options and subcommands. An option
  shows what its ``--help`` line does: its names with their metavar (``-h, --help``,
  ``--watch KEY``), its help, and its default, range or ``required`` in a column of
  their own (mkdocs-click 0.9 printed click 8.3's ``Sentinel.UNSET`` for each option
  without a default). Help text outside code is escaped (``<…>``, ``*``, ``_``), so the page
  shows every character ``--help`` does: a browser took ``<shard>`` for a tag and dropped
  it.
- Sphinx roles in docstrings (``:class:`X```, ``:meth:`x```), which mkdocstrings shows
  as they are, become code on the page.
"""

from __future__ import annotations

import html
import importlib
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parents[2]
OPENAPI = re.compile(r"^<!-- openapi: (\S+) -->$", re.M)
INCLUDE = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"$', re.M)
MARK = re.compile(r"^.*--8<-- \[(?:start|end):[\w-]+\].*\n?", re.M)
METHODS = ("get", "post", "put", "patch", "delete")
CLI = re.compile(r"^<!-- cli: ([\w.]+):(\w+) (\S+) -->$", re.M)
# mkdocstrings renders ``:class:`~timer.X``` as ``:class:<code>~timer.X</code>``
ROLE = re.compile(r":(?:class|meth|func|attr|exc|mod|data|obj):<code>~?([^<]+)</code>")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    up = "../" * page.file.src_uri.count("/")  # from the page to the site's root
    markdown = INCLUDE.sub(lambda m: include(m.group(1), m.group(2), up), markdown)
    match = OPENAPI.search(markdown)
    if match:
        doc = json.loads((ROOT / match.group(1)).read_text())
        markdown = markdown[: match.start()] + render(doc) + markdown[match.end() :]
    match = CLI.search(markdown)
    if match:
        command = getattr(importlib.import_module(match.group(1)), match.group(2))
        text = render_cli(command, match.group(3))
        markdown = markdown[: match.start()] + text + markdown[match.end() :]
    return markdown


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    return ROLE.sub(lambda m: f"<code>{m.group(1)}</code>", html)


def render_cli(
    command: click.Command, prog: str, depth: int = 2, parent: click.Context | None = None
) -> str:
    """The command and every subcommand, as ``tickwheel COMMAND --help`` reads them."""
    # the parent's context passes on what --help inherits (``-h`` as well as ``--help``)
    ctx = click.Context(command, info_name=prog.rsplit(" ", 1)[-1], parent=parent,
                        **command.context_settings)  # fmt: skip
    out = [f"{'#' * min(depth, 6)} {prog}", ""]
    out += help_paragraphs(command.help or "")
    out += ["**Usage:**", "", "```", f"{prog} {' '.join(command.collect_usage_pieces(ctx))}"]
    out += ["```", ""]
    records = [option_record(p, ctx) for p in command.get_params(ctx)]
    if any(records):
        out += [
            "**Options:**",
            "",
            "| option | description | default, range |",
            "|---|---|---|",
        ]
        for record in records:
            if record is not None:
                spec, text, extras = record
                out.append(f"| `{spec}` | {cell(prose(text))} | {cell(prose(extras))} |")
        out.append("")
    subs = []
    if isinstance(command, click.Group):
        subs = [(n, c) for n, c in command.commands.items() if not c.hidden]
        if subs:
            out += ["**Subcommands:**", ""]
            for name, sub in subs:
                slug = f"{prog} {name}".replace(" ", "-").lower()
                short = prose(sub.get_short_help_str(limit=120))
                out.append(f"- [{name}](#{slug}): {short}")
            out.append("")
    out += help_paragraphs(command.epilog or "")  # --help prints it last
    for name, sub in subs:
        out.append(render_cli(sub, f"{prog} {name}", depth + 1, ctx))
    return "\n".join(out)


def help_paragraphs(text: str) -> list[str]:
    """A click help text as Markdown: its paragraphs, a ``\\b`` block kept line by line,
    nothing after ``\\f``."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", text.split("\f", 1)[0].strip()):
        lines = para.splitlines()
        if lines and lines[0].strip() == "\b":
            out += ["```text", *textwrap.dedent("\n".join(lines[1:])).splitlines(), "```", ""]
        elif para.strip():
            out += [prose(" ".join(line.strip() for line in lines)), ""]
    return out


def prose(text: str) -> str:
    """Help text as Markdown that shows it as written: outside its `code` spans (kept:
    the site shows them as code), HTML's specials escaped, and the characters Markdown
    would take for emphasis."""
    out, at = [], 0
    for m in CODE_SPAN.finditer(text):
        out += [_plain(text[at : m.start()]), m.group(0)]
        at = m.end()
    return "".join([*out, _plain(text[at:])])


def _plain(text: str) -> str:
    return re.sub(r"([\\*_])", r"\\\1", html.escape(text, quote=False))


# what click appends to an option's help, and what a help says in its words the same way
# ("[default: 16; 1<=x<=16384]", "[default: tw-ROLE]"): the page gives it a column
EXTRAS = re.compile(r"(?:\s+\[[^\[\]]*\])+$")


def option_record(param: click.Parameter, ctx: click.Context) -> tuple[str, str, str] | None:
    """An option as ``--help`` shows it: its names and metavar (``-h, --help``, ``--shards
    INTEGER RANGE``, ``--watch KEY``), its help, and what the brackets after the help say
    (default, range, required), or None for an argument or a hidden option."""
    if not isinstance(param, click.Option):
        return None
    record = param.get_help_record(ctx)
    if record is None:
        return None
    spec, text = record
    match = EXTRAS.search(text)
    if match is None:
        return spec, text, ""
    extras = re.findall(r"\[([^\[\]]*)\]", match.group(0))
    return spec, text[: match.start()], "; ".join(extras)


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
