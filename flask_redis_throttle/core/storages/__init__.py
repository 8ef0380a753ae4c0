"""The storages: Redis, Redis Cluster and Sentinel clients built from URLs, ``local://`` (a private redis-server) and
``memory://`` (the embedded store that runs the same scripts)."""
