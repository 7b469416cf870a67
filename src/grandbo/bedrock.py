"""The boto3 client both Bedrock parts use (Titan embeddings, Converse for triage narration and learning), with
the configuration errors a user can act on: boto3 not installed, no region to be found."""

from __future__ import annotations

from typing import Any

from grandbo.errors import ConfigError


def runtime_client(
    region: str | None, endpoint_url: str | None, timeout: float, attempts: int, *, needed_by: str, where: str
) -> Any:
    """A `bedrock-runtime` client. `needed_by` names the part in the errors ("Bedrock Converse
    (GRANDBO_LLM_PROVIDER=bedrock)"); `where` says which setting gives its region and what must be enabled there."""
    try:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError
    except ImportError as error:
        raise ConfigError(
            f"{needed_by} needs boto3: pip install 'grandbo[bedrock]'.", detail={"missing": "boto3"}
        ) from error
    try:
        return boto3.client(
            "bedrock-runtime",
            region_name=region,
            endpoint_url=endpoint_url,
            config=Config(connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": attempts}),
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
