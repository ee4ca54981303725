"""
The domain: the buffers and their journals, clients and their state, the extension link and the
commands sent over it, redaction, rate limits, paths and the daemon's identity: the lowest of the
layers the import contracts keep (pyproject.toml, docs/architecture.md).
"""
