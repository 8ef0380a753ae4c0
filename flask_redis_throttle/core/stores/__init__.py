"""The stores operators read and write: the refusal log, the overrides, an identity's usage, and resets."""
