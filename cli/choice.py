"""A choice whose missing-value error is one line, as every other error of the CLI is."""

from __future__ import annotations

from typing import Any

import click


class Choice(click.Choice[Any]):
    """``click.Choice``, but a missing value says ``Missing option '--scope'. Choose read,
    write or admin.`` where click put each choice on a tab-indented line of its own."""

    def get_missing_message(self, param: click.Parameter, ctx: click.Context | None) -> str:
        names = [str(c) for c in self._normalized_mapping(ctx=ctx).values()]
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        return f"Choose {listed}."
