"""A Ray Tune search as an attempt's workload (``tune_loop``), resumable in another region
from a snapshot that is checked before it is believed (``snapshot``)."""
