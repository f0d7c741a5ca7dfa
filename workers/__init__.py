"""The worker process: ``python -m workers``. The job functions and the worker loop it runs
are library code (``hermes_redis.jobs``)."""
