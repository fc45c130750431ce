"""The run's state: the journal's events as typed records (``events``) and the one
fold of them (``state``) that resume, status, the report and the result all read."""
