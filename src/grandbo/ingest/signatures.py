"""PagerDuty's webhook signatures: `X-PagerDuty-Signature: v1=<hex HMAC-SHA256 of the raw body>[,v1=...]`.

PagerDuty signs each delivery with every secret of the subscription while one rotates, so the header may
carry several signatures; a delivery is genuine when any of them matches any secret the organization holds.
Comparisons take constant time.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence


def sign(body: bytes, secret: str) -> str:
    """The `v1=` signature of `body` with `secret` (what PagerDuty sends, and what tests send)."""
    return "v1=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(body: bytes, header: str | None, secrets: Sequence[str]) -> bool:
    """Whether any `v1=` signature in `header` is `body` signed with any of `secrets`."""
    if not header or not secrets:
        return False
    offered = [part.strip() for part in header.split(",") if part.strip().startswith("v1=")]
    expected = [sign(body, secret) for secret in secrets]
    matched = False
    for signature in offered:
        for candidate in expected:
            matched |= hmac.compare_digest(signature.encode(), candidate.encode())
    return matched
