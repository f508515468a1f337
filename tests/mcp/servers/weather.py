"""Weather: forecasts and alerts (made-up data). A plain FastMCP server over stdio, or over
streamable HTTP with ``--http PORT``. Used by the tests and the example configuration."""

from __future__ import annotations

import argparse

from pydantic import BaseModel

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("weather", instructions="Weather forecasts and severe-weather alerts for cities and regions.",
              log_level="WARNING")


class Alerts(BaseModel):
    region: str
    alerts: list[str]


@mcp.tool()
def get_forecast(city: str, days: int = 3) -> str:
    """Weather forecast for a city: temperature and rain for the next days."""
    if city.lower() == "atlantis":
        raise ValueError(f"unknown city {city!r}")
    return f"{city}: sunny, 21 C, no rain for the next {days} days"


@mcp.tool()
def get_alerts(region: str) -> Alerts:
    """Severe weather alerts (storms, floods, heat waves) in effect for a region."""
    return Alerts(region=region, alerts=[f"heat wave warning for {region}"])


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    a = p.parse_args()
    if a.http:
        mcp.settings.port = a.http
        mcp.run("streamable-http")
    else:
        mcp.run()
