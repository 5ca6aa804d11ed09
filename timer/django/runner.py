"""The runner of Django tasks kept by ``timer.django``::

    DJANGO_SETTINGS_MODULE=proj.settings tickwheel --namespace django \\
        handle timer.django.runner:handlers

Importing it sets Django up (``django.setup()``), so the project's settings must be
named. ``handlers`` is a group (``django``) whose every expired timer with a Django task
runs that task through the backend that enqueued it; its result is written as it goes.
"""

from __future__ import annotations

import django

django.setup()

from ..durable.model.models import Outcome  # noqa: E402
from ..errors import ConfigError  # noqa: E402
from ..handlers import Handlers  # noqa: E402
from . import KEY, TickwheelBackend, task_backends  # noqa: E402

GROUP = "django"


def run(o: Outcome) -> None:
    """Run the task a fired timer keeps (an outcome that keeps none is passed over)."""
    body = o.payload.get(KEY) if isinstance(o.payload, dict) else None
    if body is None:
        return
    backend = task_backends[body["backend"]]
    if not isinstance(backend, TickwheelBackend):
        raise ConfigError(
            f"task backend {body['backend']!r} is not a timer.django.TickwheelBackend here: "
            "run this runner with the settings that enqueued the task"
        )
    backend.run(o.id, body, o.created_ms)


handlers = Handlers(group=GROUP)
handlers.on("expired")(run)
