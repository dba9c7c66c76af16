"""Serving and calling gRPC: one concept, a gRPC hop, both ends.

The server bootstrap (health, reflection, interceptors, error mapping), stream handling,
concurrency and per-project call slots, re-checked tokens on open streams, TLS, client
channels with bearer token and trace context, and the wire-size budget checked before a
request is parsed. May use the library's floors (config, auth, errors, observability,
postgres); never a service.
"""
