"""The service's routes, one router per resource: ranking (score, search), the catalog (servers, its calibration),
learning from use (feedback, examples), and the probes (health, readiness, metrics).

Routes reach the app's shared state only through :mod:`serve.deps`.
"""

from __future__ import annotations

from fastapi import APIRouter

from . import calibration, learning, probes, ranking, servers

__all__ = ["ROUTERS"]

# In the order the OpenAPI document lists them.
ROUTERS: tuple[APIRouter, ...] = (ranking.router, servers.router, calibration.router, learning.router,
                                   probes.router)
