"""A choice whose missing-value error is one line, as every other error of the CLI is."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

import click

from timer.errors import quoted


class Choice(click.Choice[Any]):
    """``click.Choice``, but a missing value says ``Missing option '--scope'. Choose read,
    write or admin.`` where click put each choice on a tab-indented line of its own; a
    wrong one is quoted as every message of ours quotes what it was given (``"late" is not
    one of "pending", "expired"…``, where click wrote Python's ``'late'``), with the
    nearest choice when one is near (``acl wrker``: ``Did you mean "worker"?``); and
    ``aliases`` (not listed) are taken as the choice they name (``--log-level WARN``, as
    Python's logging takes it)."""

    def __init__(
        self,
        choices: Sequence[str],
        case_sensitive: bool = True,
        aliases: dict[str, str] | None = None,
    ) -> None:
        super().__init__(choices, case_sensitive=case_sensitive)
        self.aliases = aliases or {}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            key = value if self.case_sensitive else value.lower()
            value = self.aliases.get(key, value)
        return super().convert(value, param, ctx)

    def get_missing_message(self, param: click.Parameter, ctx: click.Context | None) -> str:
        names = [str(c) for c in self._normalized_mapping(ctx=ctx).values()]
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        return f"Choose {listed}."

    def get_invalid_choice_message(self, value: Any, ctx: click.Context | None) -> str:
        choices = [str(c) for c in self._normalized_mapping(ctx=ctx).values()]
        names = ", ".join(quoted(c) for c in choices)
        one = len(self.choices) == 1
        near = difflib.get_close_matches(str(value), choices, n=1)
        meant = f" Did you mean {quoted(near[0])}?" if near and not one else ""
        return f"{quoted(value)} is not {'' if one else 'one of '}{names}.{meant}"
