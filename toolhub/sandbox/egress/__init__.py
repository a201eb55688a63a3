"""Network egress for sandboxes that an admin granted it: the per-run filtering proxy
(`proxy`), its HTTP framing (`http`) and the pure rules of what may be reached (`rules`)."""

from toolhub.sandbox.egress.proxy import EgressProxy, ProxyHandle, run_proxy_in_thread, start_proxy_thread
from toolhub.sandbox.egress.rules import EgressPolicy

__all__ = ["EgressPolicy", "EgressProxy", "ProxyHandle", "run_proxy_in_thread", "start_proxy_thread"]
