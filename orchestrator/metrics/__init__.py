"""A run's numbers in TensorBoard (``board``), as event files the controller encodes
itself (``tbfile``). Imports the run state; nothing of the control loop."""
