"""A run's numbers in TensorBoard (``board``), as event files the controller encodes
itself (``tbfile``), written from a bounded queue and a thread of its own (``drain``, which
the run's tracker uses too). Imports the run state; nothing of the control loop."""
