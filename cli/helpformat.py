"""Help text wrapped at spaces only: a word, a URL above all, stays whole on one line.

click wraps help with ``textwrap``'s defaults, which break a word longer than the column
(``https://tickwheel.readthedo`` / ``cs.io/guides/http/#webhooks``) and break after any
hyphen (``--callback-`` / ``host``, ``redis://tw-`` / ``ROLE:PASSWORD@…``): what a reader
copies from the terminal is then not the address or option it was. Here a long word
overflows its line instead. The formatter wraps each paragraph itself and hands it to
click as a ``\\b`` block (which click indents but does not rewrap), so click's layout,
its columns and indents, stays its own.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable

import click


def _fill(text: str, width: int, first: str = "", indent: str = "") -> list[str]:
    """``text`` wrapped at spaces to ``width`` columns (at least 10), words kept whole,
    its first line begun with ``first`` and the others with ``indent``."""
    wrapper = textwrap.TextWrapper(
        max(width, 10),
        initial_indent=first,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return wrapper.wrap(text) or [""]


def _prewrapped(text: str, width: int) -> str:
    """``text``'s paragraphs, each wrapped to ``width`` (less its own indent) and marked
    ``\\b`` so click keeps its lines; a ``\\b`` block the text has stays as written."""
    out = []
    for para in re.split(r"\n[ \t]*\n", text.expandtabs()):
        lines = para.splitlines()
        while lines and not lines[0].strip():
            lines.pop(0)
        if not lines:
            continue
        if lines[0].strip() == "\b":
            out.append("\n".join(lines))
            continue
        indent = len(lines[0]) - len(lines[0].lstrip())
        # lines joined as click joins them: the two spaces before "[default: …]" stay
        wrapped = _fill(" ".join(line.strip() for line in lines), width - indent)
        out.append("\n".join([" " * indent + "\b", *wrapped]))
    return "\n\n".join(out)


class WholeWordsFormatter(click.HelpFormatter):
    """click's help formatter, but a line breaks only at a space."""

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        # click's layout: the arguments right of "Usage: PROG" when 20 columns are left
        # there, else on the next line, indented
        if not args:
            super().write_usage(prog, args, prefix)
            return
        first = f"{'Usage: ' if prefix is None else prefix:>{self.current_indent}}{prog} "
        width = self.width - self.current_indent
        if width >= len(first) + 20:
            lines = _fill(args, width, first, " " * len(first))
        else:
            indent = " " * (max(self.current_indent, len(first) - len(prog) - 1) + 4)
            lines = [first.rstrip(), *_fill(args, width, indent, indent)]
        self.write("\n".join(lines) + "\n")

    def write_text(self, text: str) -> None:
        super().write_text(_prewrapped(text, self.width - self.current_indent))

    def write_dl(
        self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2
    ) -> None:
        rows = list(rows)
        widths = click.formatting.measure_table(rows)
        if len(widths) != 2:  # click's own error
            super().write_dl(rows, col_max, col_spacing)
            return
        first_col = min(widths[0], col_max) + col_spacing
        text_width = max(self.width - first_col - 2, 10)  # as click reckons it
        kept = [
            (first, _prewrapped(_one_bracket(text), text_width) if text else "")
            for first, text in rows
        ]
        super().write_dl(kept, col_max, col_spacing)


# a default written in the help (its option's default is None: "not given") and the range
# click appends after it: "[default: 5]  [1<=x<=1000]" reads as click's own "[default: 5;
# 1<=x<=1000]"
_TWO_BRACKETS = re.compile(r"\[default: ([^\]]*)\]  \[([^\]]+)\]$")


def _one_bracket(text: str) -> str:
    return _TWO_BRACKETS.sub(r"[default: \1; \2]", text.rstrip())


class HelpContext(click.Context):
    formatter_class = WholeWordsFormatter


def wrap_whole_words(command: click.Command) -> None:
    """Give ``command`` and every command under it the whole-words help formatter."""
    command.context_class = HelpContext
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            wrap_whole_words(sub)
