"""The engine's compiled core (``_speedups.c``): see ``system_timer._install_compiled_core``."""

def install(
    task: type, task_list: type, wheel: type, timer: type, invalid_input: type[Exception]
) -> None: ...
