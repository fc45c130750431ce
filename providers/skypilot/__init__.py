"""The SkyPilot provider: Ray clusters on AWS, GCP, Kubernetes and Slurm through SkyPilot's
SDK, imported lazily so that ``cloud=local`` needs none of it (``provider``), and the script
the nodes run to join one Ray (``nodes``)."""
