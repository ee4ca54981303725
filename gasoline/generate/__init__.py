"""
Artifact generators: data in, artifact out (HAR, SARIF, CSP, SRI, scripts, PR summaries).

No I/O: C{generate … save_to} is the tool layer's job. See docs/analysis-and-generators.md.
"""

from gasoline.generate.csp import csp, origins_by_type
from gasoline.generate.har import har
from gasoline.generate.pr import pr_summary
from gasoline.generate.sarif import sarif
from gasoline.generate.scripts import best_locator, playwright_test, reproduction
from gasoline.generate.sri import sri

__all__ = ["best_locator", "csp", "har", "origins_by_type", "playwright_test", "pr_summary",
           "reproduction", "sarif", "sri"]
