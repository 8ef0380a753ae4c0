"""The request path: what runs on each request of a Flask app.

The settings read from the app's config, the hooks that plan a request's
limits, find its identities, ask the core for one decision and answer
with headers or a refusal, the overrides looked up, and the concurrency
slots given back. Private: import from ``flask_redis_throttle``.
"""
