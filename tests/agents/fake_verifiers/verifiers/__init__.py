"""A stand-in of the verifiers package for the adapter's tests (see v1/__init__.py)."""
