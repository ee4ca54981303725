"""
Storage: the telemetry store and its ring buffers, the notifier it publishes through, test
boundaries, the journals and their wiring, encryption at rest, the state dir's private files,
the small JSON documents and the screenshots kept on disk.
"""
