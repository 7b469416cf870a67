"""Which URLs the console draws as links to elsewhere: absolute http(s) ones only."""

from __future__ import annotations

from grandbo.urls import web_url_problem


def web_link(url: str) -> bool:
    """Whether `url` may be drawn as a link: an absolute http(s) URL with a host, nothing else (no javascript:,
    data: or relative URL), without spaces, control or invisible characters (`urls.web_url_problem`)."""
    return web_url_problem(url) is None
