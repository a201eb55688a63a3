"""What an operator's tools read: liveness and readiness for a load balancer or an orchestrator
(`/healthz`, `/readyz`) and Prometheus metrics (`/metrics`); docs/deploying.md describes them."""
