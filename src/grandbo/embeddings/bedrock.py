"""Amazon Titan Text Embeddings v2 on Bedrock, through boto3 (`pip install 'grandbo[bedrock]'`)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import httpx

from grandbo.bedrock import refusal, runtime_client
from grandbo.config import Settings
from grandbo.embeddings._http import answer_limit
from grandbo.embeddings.base import Purpose, register
from grandbo.errors import ConfigError, EmbeddingError, ProviderUnavailableError
from grandbo.http import AnswerTooLarge
from grandbo.pending_work import EMBED_MOST_SECONDS

TITAN_DIMENSIONS = (256, 512, 1024)


class BedrockProvider:
    name = "bedrock"
    min_similarity = 0.2

    def __init__(self, settings: Settings) -> None:
        if settings.bedrock_dimension not in TITAN_DIMENSIONS:
            raise ConfigError(
                f"Titan v2 embeds into 256, 512 or 1024 dimensions, not {settings.bedrock_dimension}: "
                "fix GRANDBO_BEDROCK_DIMENSION.",
                detail={"dimension": settings.bedrock_dimension},
            )
        self.model = settings.bedrock_model
        self.dimension = settings.bedrock_dimension
        self._timeout = settings.http_timeout_seconds
        # each call within the timeout in all, and no more of an answer than one vector's (`answer_limit`)
        self._runtime = runtime_client(
            settings.bedrock_region, settings.bedrock_endpoint_url, self._timeout, 2,
            limit=answer_limit(1, self.dimension), needed_by="Bedrock embeddings (the bedrock provider)",
            where="GRANDBO_BEDROCK_REGION (or AWS_REGION) to the region Titan Text Embeddings v2 is enabled in",
        )  # fmt: skip

    def close(self) -> None:
        self._runtime.close()

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> list[list[float]]:
        from botocore.exceptions import BotoCoreError, ClientError

        vectors = []
        for text in texts:  # Titan v2 takes one text per call
            body = json.dumps({"inputText": text, "dimensions": self.dimension, "normalize": True})
            try:
                response = self._runtime.client.invoke_model(
                    modelId=self.model, body=body, contentType="application/json", accept="application/json"
                )
                vectors.append(list(json.loads(response["body"].read())["embedding"]))
            except ClientError as error:
                # By its code (`grandbo.bedrock.refusal`): an account or model refused is no text's fault
                # (`texts_fault`: its batch is not asked again in halves), and a throttle's Retry-After is the least
                # the jobs wait.
                said = refusal(error, EMBED_MOST_SECONDS)
                kind = ProviderUnavailableError if said.retry else EmbeddingError
                remedy = "Check model access, region and credentials." if said.account else "Check the text and model."
                wait = "" if said.wait is None else f" after the {said.wait:g} s its Retry-After asks"
                raise kind(
                    f"Bedrock refused to embed ({said.code}): {error}. "
                    + (f"It will be retried{wait}." if said.retry else remedy),
                    detail={"provider": self.name, "code": said.code, "status": said.status,
                            **({"refused": "account"} if said.account else {}),
                            **({} if said.wait is None else {"retry_after_s": said.wait}),
                            **({"timed_out": True} if said.timed_out else {})},
                ) from error  # fmt: skip
            except (BotoCoreError, httpx.HTTPError) as error:
                raise ProviderUnavailableError(
                    f"Bedrock did not answer within {self._timeout:g}s ({type(error).__name__}: {error}); the "
                    "entries stay stored and the embed jobs will be retried.",
                    detail={"provider": self.name, "timed_out": isinstance(error, httpx.TimeoutException)},
                ) from error
            except AnswerTooLarge as error:
                raise EmbeddingError(
                    f"Bedrock sent {error} for one vector of {self.dimension} dimensions (reading stopped "
                    "there); nothing of it was used, the entries stay stored and the embed jobs will be retried.",
                    detail={"provider": self.name},
                ) from None
            except RecursionError:  # arrays nested past Python's parser: no ValueError (probe 31)
                raise EmbeddingError(
                    "Bedrock answered with a body nested deeper than any Titan embedding; nothing of it was used, "
                    "the entries stay stored and the embed jobs will be retried.",
                    detail={"provider": self.name},
                ) from None
            except (KeyError, ValueError, TypeError) as error:  # no "embedding", or not a list (null, a number)
                raise EmbeddingError(
                    f"Bedrock answered with a body that is not a Titan embedding: {error}",
                    detail={"provider": self.name},
                ) from error
        return vectors


@register("bedrock")
def _factory(settings: Settings) -> BedrockProvider:
    return BedrockProvider(settings)
