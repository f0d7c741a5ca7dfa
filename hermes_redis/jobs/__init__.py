"""RQ job functions and the worker loop that runs them: library code. ``workers/`` (the
worker process) and ``hermes-redis worker`` both call ``worker.run``."""
