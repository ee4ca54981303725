"""
Redaction, in one room: the pass every exit applies (L{redactor}), the text scan (L{scan}) over
the secret shapes (L{shapes}), the field rule (L{fields}), the names that hold secrets and the
marker (L{keys}), and stored entries redacted once and kept (L{once}). Layered by an import
contract (pyproject.toml). C{gasoline.streaming.redaction} is the streaming layer's adapter
over L{redactor} (events' page-supplied texts, remembered).
"""
