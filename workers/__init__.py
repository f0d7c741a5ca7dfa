"""RQ jobs and the worker entry point for hermes-redis."""
