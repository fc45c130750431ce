"""What the tests share: runs of the orchestrator and Ray's processes (runs), local S3, GCS
and metadata servers (servers), a scripted cloud for the controller's loop (fakecloud), the
CI's Slurm cluster (onprem), TensorBoard files read back (tbread), the install resolution
(resolution), the journal's folds as they were (legacy_folds), planted hostile files
(hostile), a surviving run's invariants (invariants) and the repository's paths (paths).
It imports the product and itself, never a test module."""
