"""A Django project for timer.django's tests (tests/integration/test_django.py)."""
