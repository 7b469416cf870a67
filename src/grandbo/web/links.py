"""Which URLs the console draws as links to elsewhere: absolute http(s) ones only."""

from __future__ import annotations

from urllib.parse import urlsplit


def web_link(url: str) -> bool:
    """Whether `url` may be drawn as a link: an absolute http(s) URL with a host, nothing else (no javascript:,
    data: or relative URL), without spaces or control characters."""
    if not url or len(url) > 2000 or any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return False
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(host)
