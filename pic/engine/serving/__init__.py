"""Serving model: replicas with chunked-prefill + continuous-batching decode advanced in closed form,
a router, and the policy lifecycle driven by the event loop."""

from pic.engine.serving.model import ServingModel, Workload
from pic.engine.serving.replica import Phase, Replica
from pic.engine.serving.router import Router

__all__ = ["ServingModel", "Workload", "Replica", "Phase", "Router"]
