"""seqmodels: an example user project for the orchestrator (see ../README.md)."""
