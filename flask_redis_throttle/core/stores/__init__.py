"""The stores operators read and write: the refusal log, the overrides,
the usage of an identity, and resets.
"""
