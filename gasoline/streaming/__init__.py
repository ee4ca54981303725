"""
Context streaming: per-agent subscriptions, matching off the ingest path, a bounded
per-agent inbox, and delivery to the agent's own stream. See docs/streaming.md.

 - L{gasoline.streaming.events}: what a buffer write means as events (classification);
 - L{gasoline.streaming.subscription}: validation, persistence form, compiled matchers;
 - L{gasoline.streaming.tally}: bucket keys, and the shared count of throttled events;
 - L{gasoline.streaming.inbox}: one subscribed agent's state and its bounded inbox;
 - L{gasoline.streaming.redaction}: what an event carries out (redacted, marked untrusted);
 - L{gasoline.streaming.delivery}: the ways out of an inbox as it fills (the agent's stream,
   resource subscribers, long-polls, C{GET /events} listeners);
 - L{gasoline.streaming.dispatch}: writes matched into the inboxes within each agent's rate
   limit, and the notices that summarise what did not fit;
 - L{gasoline.streaming.hub}: L{Streaming<gasoline.streaming.hub.Streaming>}, the component the
   tools and routes use, and its table of subscribed agents;
 - L{gasoline.streaming.metrics}: its series on C{GET /metrics}.
"""
