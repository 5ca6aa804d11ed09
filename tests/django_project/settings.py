"""Settings of the test project: its tasks go to tickwheel (no URL: TICKWHEEL_REDIS_URL,
else the running embedded server), in the namespace TICKWHEEL_NAMESPACE names."""

import os

SECRET_KEY = "tickwheel-tests-only"
USE_TZ = True
INSTALLED_APPS = ["django_tasks"]  # the backport's checks; Django 6 has them built in
DATABASES: dict[str, object] = {}
TIME_ZONE = "UTC"  # startproject's (Django's own default: America/Chicago)
TASKS = {
    "default": {
        "BACKEND": "timer.django.TickwheelBackend",
        "OPTIONS": {"NAMESPACE": os.environ.get("TICKWHEEL_NAMESPACE", "django")},
    }
}
