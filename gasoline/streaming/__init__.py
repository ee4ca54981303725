"""
Context streaming: per-agent subscriptions, matching off the ingest path, a bounded
per-agent inbox, and delivery to the agent's own stream. See docs/streaming.md.

 - L{gasoline.streaming.events}: what a buffer write means as events (classification);
 - L{gasoline.streaming.subscription}: validation, persistence form, compiled matchers;
 - L{gasoline.streaming.hub}: L{Streaming}, the inboxes and every way out of them.
"""
