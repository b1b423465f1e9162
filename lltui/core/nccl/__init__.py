"""NCCL: what its environment variables do, and NCCL_DEBUG logs and nccl-tests output read."""
