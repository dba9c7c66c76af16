"""Test support shipped with the library: fixtures, fakes and invariant checks."""
