"""Bearer tokens of the HTTP API: each scoped to namespaces and to ``read``, ``write`` or
``admin`` (each includes the ones before it), stored hashed in a JSON file.

A token is ``tw_<id>_<secret>``: the id finds its entry, the secret (32 random bytes)
is compared with the stored SHA-256 of it in constant time. The secret is shown once,
by ``tickwheel tokens create``, and never stored, logged or echoed. The server reads the
file again when it changes, so a revoked token stops working without a restart.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from timer.durable.model.keys import check_namespace
from timer.errors import ConfigError, InvalidInput, quoted

SCOPES = ("read", "write", "admin")
TOKEN = re.compile(r"^tw_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
_PASTED = re.compile(r"^tw_([0-9a-f]{12})(?:_|$)")  # a whole token, or cut short


def id_in(given: str) -> str | None:
    """The id inside a whole token given where an id goes (``tw_<id>_<secret>``, as
    ``tokens create`` printed it, or cut short), else None: the id is what names it."""
    m = _PASTED.match(given.strip())
    return m.group(1) if m else None


@dataclass(frozen=True)
class Token:
    """A stored token: what it may do, never its secret."""

    id: str
    sha256: str
    scope: str
    namespaces: tuple[str, ...]  # ("*",): every namespace
    name: str = ""
    created: str = ""

    def allows(self, scope: str, namespace: str | None) -> bool:
        if SCOPES.index(self.scope) < SCOPES.index(scope):
            return False
        return namespace is None or "*" in self.namespaces or namespace in self.namespaces


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenFile:
    """The tokens of one file (created on first use, mode 0600)."""

    def __init__(self, path: Path, *, make_dirs: bool = False) -> None:
        """``make_dirs``: create the file's directory if it is missing (the state
        directory's); a path someone gave must be in a directory that exists (a typo
        created directories where nobody looks)."""
        self.path, self.make_dirs = path, make_dirs
        self._mtime: tuple[int, int] | None = None  # (mtime ns, size) of what was read
        self._tokens: dict[str, Token] = {}

    def load(self) -> dict[str, Token]:
        """The tokens, read again only when the file changed."""
        try:
            st = self.path.stat()
            mtime = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            self._mtime, self._tokens = None, {}
            return self._tokens
        if mtime != self._mtime:
            try:
                raw = json.loads(self.path.read_text())
                tokens = {
                    t["id"]: Token(**{**t, "namespaces": tuple(t["namespaces"])})
                    for t in raw["tokens"]
                }
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ConfigError(f"token file {self.path} cannot be read: {exc}") from None
            self._mtime, self._tokens = mtime, tokens
        return self._tokens

    def check(self, bearer: str) -> Token | None:
        """The token a bearer value names, if it is one of ours and its secret matches."""
        m = TOKEN.match(bearer)
        if m is None:
            return None
        token = self.load().get(m.group(1))
        if token is None or not hmac.compare_digest(token.sha256, _digest(m.group(2))):
            return None
        return token

    def create(self, scope: str, namespaces: list[str], name: str = "") -> tuple[Token, str]:
        """A new token; (its entry, the bearer value to hand out: shown once)."""
        if scope not in SCOPES:
            raise InvalidInput(f"scope must be one of {', '.join(SCOPES)}, got {quoted(scope)}")
        if not namespaces:
            raise InvalidInput('a token needs at least one namespace (or "*" for all)')
        if not isinstance(name, str) or len(name) > 100 or not name.isprintable():
            # shown in `tokens list`'s table and in every action's log line
            raise InvalidInput(
                "a token's name is printable text of at most 100 characters (no newline, "
                f"tab or other control character), got {quoted(name)}"
            )
        for ns in namespaces:
            if ns != "*":
                check_namespace(ns)
        tid, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        token = Token(tid, _digest(secret), scope, tuple(namespaces), name, now)
        self._write({**self.load(), tid: token})
        return token, f"tw_{tid}_{secret}"

    def revoke(self, token_id: str) -> bool:
        tokens = dict(self.load())
        if tokens.pop(token_id, None) is None:
            return False
        self._write(tokens)
        return True

    def _write(self, tokens: dict[str, Token]) -> None:
        if self.make_dirs:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.parent.is_dir():
            raise ConfigError(
                f"no directory {self.path.parent} for the token file {self.path.name}: "
                "create it first, or give a path in a directory that exists"
            )
        data = {"tokens": [asdict(t) for t in tokens.values()]}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tokens-")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)  # readers see the old file or the new, never half
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._mtime = None
