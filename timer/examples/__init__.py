"""Examples that ship with tickwheel: ``tickwheel handle timer.examples.handlers:on_timeout``
runs from any directory once tickwheel is installed."""
