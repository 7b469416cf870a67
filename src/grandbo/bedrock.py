"""The boto3 client both Bedrock parts use (Titan embeddings, Converse for triage narration and learning), with
the configuration errors a user can act on: boto3 not installed, no region to be found.

boto3 signs each request and reads its answer, but its transport has the two faults `grandbo.http.post_bounded`
fixed for the HTTP providers: its read timeout bounds each read, not the call, and it reads a whole answer into
memory (Converse's always; InvokeModel's when the caller reads the body). A Bedrock endpoint (or a proxy in front
of it) that trickled its answer held the call for as long as it trickled (20 bytes over 5 s: 5 s, with a 1 s
timeout), and a 300 MB answer took the process from 93 MB to a 693 MB peak. So a `Runtime` sends what boto3
signed through its own httpx client (botocore's `before-send` event: an answer returned there is the one botocore
parses), within one deadline for the whole call, boto3's retries included, and at most the bytes the call could
need.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from grandbo.errors import ConfigError
from grandbo.http import client, retry_after, send_bounded

# Bedrock runtime's error codes (InvokeModel's and Converse's as AWS documents them, and the common ones of every AWS
# API) by what they say: the service busy or failing for now (retry later), or the account, its credentials or the
# model refused (every request would be: no text of a batch is at fault). Any other (a ValidationException about the
# input, ModelErrorException) is the request's: maybe one text's.
RETRY_LATER = frozenset({"ThrottlingException", "ServiceUnavailableException", "ModelNotReadyException",
                         "InternalServerException", "InternalFailure", "ServiceQuotaExceededException",
                         "ModelTimeoutException"})  # fmt: skip
ACCOUNT_REFUSED = frozenset({"AccessDeniedException", "ResourceNotFoundException", "UnrecognizedClientException",
                             "ExpiredTokenException", "InvalidSignatureException", "IncompleteSignature",
                             "MissingAuthenticationTokenException", "InvalidClientTokenId", "NotAuthorized",
                             "AccessDenied"})  # fmt: skip
# A ValidationException is the input's (a text too long for the model) unless it names the model or the account: "The
# provided model identifier is invalid", "Invocation of model ID ... with on-demand throughput isn't supported", "Your
# account is not authorized to invoke this API operation".
_ABOUT_THE_MODEL = ("model identifier", "model id", "on-demand throughput", "inference profile", "not authorized",
                    "your account")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Refusal:
    """What a Bedrock error answer says (`refusal`): its code and HTTP status, whether to retry later (`wait`: the
    seconds its Retry-After asks, if any), whether the account or model is refused, whether the model ran out of
    time."""

    code: str
    status: int | None
    retry: bool
    account: bool
    wait: float | None
    timed_out: bool


def refusal(error: Any, most: float) -> Refusal:
    """A botocore ClientError read (`Refusal`); a Retry-After of at most `most` seconds."""
    response = getattr(error, "response", None) or {}
    code, message = str(response.get("Error", {}).get("Code", "")), str(response.get("Error", {}).get("Message", ""))
    meta = response.get("ResponseMetadata", {})
    status = meta.get("HTTPStatusCode") if isinstance(meta.get("HTTPStatusCode"), int) else None
    retry = code in RETRY_LATER or status in (429, 500, 502, 503, 504)
    account = not retry and (code in ACCOUNT_REFUSED or status in (401, 403, 404) or (
        code == "ValidationException" and any(words in message.lower() for words in _ABOUT_THE_MODEL)))  # fmt: skip
    wait = retry_after(httpx.Headers(meta.get("HTTPHeaders") or {}), most) if retry else None
    return Refusal(code, status, retry, account, wait, code == "ModelTimeoutException")


class Runtime:
    """A `bedrock-runtime` boto3 client (`.client`) whose calls each end within `timeout` seconds in all and read
    at most `limit` bytes of an answer: past the time, httpx.ReadTimeout; past the size, `AnswerTooLarge` (both
    raised by the client's call, never retried: a retry would start past the deadline). A connection refused or
    lost before the answer is botocore's own error, retried as boto3 retried it (`Config.retries`)."""

    def __init__(self, boto_client: Any, timeout: float, limit: int, ca_bundle: str | None) -> None:
        self.client = boto_client
        self._timeout, self._limit = timeout, limit
        self._http = client(timeout, ca_bundle=ca_bundle)
        self._calls = threading.local()  # the deadline of the call this thread is making (botocore is synchronous)
        events = boto_client.meta.events
        events.register("before-call.bedrock-runtime", self._start)  # once per call, before its attempts
        events.register("before-send.bedrock-runtime", self._send)  # each attempt

    def close(self) -> None:
        self.client.close()
        self._http.close()

    @contextlib.contextmanager
    def within(self, seconds: float | None) -> Iterator[None]:
        """The calls this thread makes inside take at most `seconds` each (None: the client's timeout): boto3 fixes
        its timeouts per client, an LLM caller's budget is per call."""
        self._calls.seconds = seconds
        try:
            yield
        finally:
            self._calls.seconds = None

    def _start(self, **_: Any) -> None:
        seconds = getattr(self._calls, "seconds", None)
        self._calls.timeout = self._timeout if seconds is None else seconds  # a budget of 0 is spent, not "none"
        self._calls.deadline = time.monotonic() + self._calls.timeout

    def _send(self, request: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse, HeadersDict

        timeout = getattr(self._calls, "timeout", self._timeout)
        deadline = getattr(self._calls, "deadline", None)
        if deadline is not None and deadline <= time.monotonic():  # a retry's back-off ended past the deadline
            raise httpx.ReadTimeout(f"the answer took over {timeout:g} s")
        from botocore.exceptions import ConnectionClosedError, EndpointConnectionError

        body = request.body.read() if hasattr(request.body, "read") else request.body
        try:
            status, headers, content = send_bounded(
                self._http, request.method, request.url, timeout=timeout, deadline=deadline, limit=self._limit,
                headers={"Accept-Encoding": "identity", **dict(request.headers.items())}, content=body,  # as boto3 asks
            )  # fmt: skip
        except httpx.ConnectError as error:  # in botocore's words, so that its retries take them as they took its own
            raise EndpointConnectionError(endpoint_url=request.url, error=error) from error
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as error:  # lost before the answer
            raise ConnectionClosedError(endpoint_url=request.url, request=request, error=error) from error
        return AWSResponse(request.url, status, HeadersDict(headers.multi_items()), _Answer(content))


class _Answer(io.BytesIO):
    """An answer already read, as botocore reads a transport's: `stream()` whole, or `read(amt)` as a body."""

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.getvalue()


def runtime_client(
    region: str | None, endpoint_url: str | None, timeout: float, attempts: int, *, limit: int, needed_by: str,
    where: str,
) -> Runtime:  # fmt: skip
    """A `bedrock-runtime` client whose calls each take at most `timeout` seconds in all and `limit` bytes of
    answer. `needed_by` names the part in the errors ("Bedrock Converse (GRANDBO_LLM_PROVIDER=bedrock)");
    `where` says which setting gives its region and what must be enabled there."""
    try:
        import boto3
        import botocore.session
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError
    except ImportError as error:
        raise ConfigError(
            f"{needed_by} needs boto3: pip install 'grandbo[bedrock]'.", detail={"missing": "boto3"}
        ) from error
    try:
        boto_client = boto3.client(
            "bedrock-runtime",
            region_name=region,
            endpoint_url=endpoint_url,
            config=Config(retries={"max_attempts": attempts}),  # its timeouts are the Runtime's (it sends)
        )
    except BotoCoreError as error:  # no region anywhere
        raise ConfigError(
            f"Cannot set up {needed_by}: {str(error).rstrip('.')}. Set {where}, e.g. us-east-1.",
            detail={"provider": "bedrock"},
        ) from error
    except ValueError as error:  # botocore's word for an endpoint that is not a URL
        raise ConfigError(
            f"Cannot set up {needed_by}: {str(error).rstrip('.')}. Give the endpoint as a URL "
            "(https://bedrock-runtime.us-east-1.amazonaws.com), or unset it to use the region's own.",
            detail={"provider": "bedrock", "endpoint_url": endpoint_url},
        ) from error
    # the CA bundle boto3 would have used (AWS_CA_BUNDLE or the profile's ca_bundle), now that httpx sends
    ca_bundle = botocore.session.get_session().get_config_variable("ca_bundle")
    return Runtime(boto_client, timeout, limit, ca_bundle or None)
