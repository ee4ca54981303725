"""
Pure analyses over telemetry entries (lists of dicts as the telemetry store returns them).

Nothing here does I/O or reads a clock; the MCP tools read the buffers and call these. See
docs/analysis-and-generators.md.
"""

from gasoline.analysis.api import api_validation, endpoint_of, normalize_path
from gasoline.analysis.bundles import error_bundles
from gasoline.analysis.changes import changes, make_checkpoint
from gasoline.analysis.clusters import error_clusters, fingerprint, summarize_logs
from gasoline.analysis.links import (
    UrlCheck,
    address_problem,
    classify_status,
    is_public_http_url,
    normalize_link,
    select_links,
    summarize_link_results,
)
from gasoline.analysis.perf import performance
from gasoline.analysis.security import security_audit, third_party_audit

__all__ = [
    "UrlCheck",
    "address_problem",
    "api_validation",
    "changes",
    "classify_status",
    "endpoint_of",
    "error_bundles",
    "error_clusters",
    "fingerprint",
    "is_public_http_url",
    "make_checkpoint",
    "normalize_link",
    "normalize_path",
    "performance",
    "security_audit",
    "select_links",
    "summarize_link_results",
    "summarize_logs",
    "third_party_audit",
]
