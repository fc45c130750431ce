"""The local provider: each region a real Ray cluster on this machine (``provider``), with
worker nodes of their own for a multi-node region (``nodes``), torch's collectives on
loopback (``loopback``)."""
