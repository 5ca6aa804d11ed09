"""``tickwheel acl ROLE``: the least-privilege Redis ACL rules of a role (no Redis needed)."""

from __future__ import annotations

import click

from timer.acl import ROLES, acl_rules, check_user

from .app import App, errors, pass_app
from .choice import Choice
from .output import emit


@click.command()
@click.argument("role", type=Choice(sorted(ROLES)), metavar="ROLE")
@click.option("--user", default=None, help="The ACL user's name.  [default: tw-ROLE]")
@pass_app
def acl(app: App, role: str, user: str | None) -> None:
    """Print the ACL SETUSER line that lets ROLE use the namespace and nothing else.

    \b
    client         schedule, cancel, complete, reschedule, notify, get, wait
    worker         lead shards and fire timers (INFO, to check the server)
    handlers       tickwheel handle: consumer group, retries, dead letters
    fire-handlers  tickwheel handle --fire: the worker's and handlers' commands
    operator       init, migrate, stats, groups, dead letters, trim, dashboard

    Replace PASSWORD (or use a Redis ACL file) and run the line with redis-cli as an
    admin; the role's processes then connect as redis://tw-ROLE:PASSWORD@host:port/0.

    \b
    Example:
      tickwheel --namespace jobs acl worker
    """
    with errors():
        name = check_user(f"tw-{role}" if user is None else user)
        rules = acl_rules(role, app.namespace)
    line = f"ACL SETUSER {name} on >PASSWORD {' '.join(rules)}"
    emit(app.json, {"role": role, "user": name, "rules": rules, "command": line}, line)
