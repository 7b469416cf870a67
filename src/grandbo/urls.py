"""A URL as it may be shown or logged: every credential in it masked; and which URLs are links to the web.

A database URL carries its password in the userinfo (`postgresql://user:PASSWORD@host/db`) or in a query
parameter (`?password=...`, `?sslpassword=...`); a libpq connection string in `password=...` words. Every
message, log line and probe that shows a URL shows `mask_url(url)`. Parsed by hand, in one pass: a URL can
be long, and nothing here backtracks.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

MASK = "***"
# Parts of a query parameter's name that say it carries a credential: libpq's password and sslpassword, and
# what other drivers and proxies call theirs.
_SECRET_NAMES = ("pass", "pwd", "secret", "token", "credential", "apikey", "api_key", "accesskey", "access_key")
_CONNINFO_SECRETS = ("password", "sslpassword")  # libpq's credential keywords in `key=value` strings


WEB_SCHEMES = ("http", "https")
MAX_WEB_URL = 2000


def web_url_problem(url: str) -> str | None:
    """Why `url` is no link to the web (None when it is one): an absolute http(s) URL with a host, at most
    MAX_WEB_URL characters, without spaces, control or invisible characters. Never javascript:, data:, file: or a
    relative URL, which a page that draws it as a link would run, show or open."""
    if not url:
        return "is empty"
    if len(url) > MAX_WEB_URL:
        return f"is {len(url):,} characters long, over {MAX_WEB_URL:,}"
    if " " in url or not url.isprintable():  # one C pass: every other space, a control or an invisible format
        # character (a right-to-left override that disguises a link, a zero-width space) is not printable
        return "holds a space, a control or an invisible character (write a space as %20)"
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return "cannot be read as a URL"
    if parts.scheme.lower() not in WEB_SCHEMES:
        scheme = parts.scheme[:20] + ":" if parts.scheme else "no scheme"
        return f"has {scheme} where http: or https: must be"
    return None if host else "names no host"


def is_secret_name(name: str) -> bool:
    """Whether a URL query parameter named `name` holds a credential."""
    lowered = unquote(name).lower()
    return any(part in lowered for part in _SECRET_NAMES)


def mask_url(url: str) -> str:
    """`url` with the password of its userinfo and every credential query parameter replaced by `***`; a libpq
    `key=value` connection string with its password words masked. Everything else is kept as it was."""
    if "://" not in url:
        return _mask_conninfo(url)
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL after all (say, a bad port): show nothing that could be a secret
        return url.split("://", 1)[0] + "://" + MASK
    netloc = parts.netloc
    if password is not None:
        userinfo, _, hostport = netloc.rpartition("@")
        netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{hostport}"
    query = _mask_query(parts.query)
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    # Put together by hand: urlunsplit drops the `//` of an empty host (`sqlite:///path`).
    shown = f"{parts.scheme}://{netloc}{parts.path}"
    return shown + (f"?{query}" if parts.query else "") + (f"#{parts.fragment}" if parts.fragment else "")


def _mask_query(query: str) -> str:
    pieces = []
    for separated in query.split("&"):
        pieces.append(";".join(_mask_pair(pair) for pair in separated.split(";")))
    return "&".join(pieces)


def _mask_pair(pair: str) -> str:
    name, equals, _ = pair.partition("=")
    return f"{name}={MASK}" if equals and is_secret_name(name) else pair


def _mask_conninfo(conninfo: str) -> str:
    """libpq's `host=h password=secret` form: the value of each credential keyword masked (quoted values may
    hold spaces and escaped quotes)."""
    out: list[str] = []
    i, n = 0, len(conninfo)
    while i < n:
        if conninfo[i].isspace():
            out.append(conninfo[i])
            i += 1
            continue
        start = i
        while i < n and not conninfo[i].isspace() and conninfo[i] != "=":
            i += 1
        keyword, end = conninfo[start:i], i
        while i < n and conninfo[i].isspace():
            i += 1
        if i >= n or conninfo[i] != "=":  # no keyword (libpq refuses it): the rest of a password with a space, say
            out.append(MASK + conninfo[end:i])
            continue
        i += 1  # the '='
        while i < n and conninfo[i].isspace():
            i += 1
        value_start = i
        if i < n and conninfo[i] == "'":
            i += 1
            while i < n and conninfo[i] != "'":
                i += 2 if conninfo[i] == "\\" else 1
            i = min(i + 1, n)
        else:
            while i < n and not conninfo[i].isspace():
                i += 1
        value = MASK if keyword.lower() in _CONNINFO_SECRETS else conninfo[value_start:i]
        out.append(f"{keyword}={value}")
    return "".join(out)
