"""The commands: one module per action of ``python -m orchestrator``, each with a ``main``.

The top layer: a command may import every other package (the control loop, the run
state, the config, the providers); nothing imports a command but ``__main__``,
the Python API (``orchestrator.api``) and the console.
"""
