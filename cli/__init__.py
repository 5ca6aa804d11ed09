"""The ``tickwheel`` command line (click)."""
