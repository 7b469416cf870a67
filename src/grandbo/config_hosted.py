"""The hosted embedding providers' and the optional LLM's settings: a part of `grandbo.config.Settings`, which
holds every knob (a module of its own only to keep each under its size)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

MAX_DIMENSION = 16_000  # pgvector's most dimensions of a vector column


class HostedSettings(BaseSettings):
    """The hosted providers' and the LLM's part of `Settings` (each field reads `GRANDBO_<NAME>` as there)."""

    model_config = SettingsConfigDict(env_prefix="GRANDBO_", extra="ignore", allow_inf_nan=False)

    # Hosted providers.
    bedrock_region: str | None = Field(default=None, description="AWS region of Bedrock (else boto3's default).")
    bedrock_model: str = Field(default="amazon.titan-embed-text-v2:0", description="Bedrock embedding model id.")
    bedrock_dimension: int = Field(default=1024, ge=1, le=MAX_DIMENSION,
        description="Titan v2 output size: 256, 512 or 1024.")  # fmt: skip
    bedrock_endpoint_url: str | None = Field(default=None, description="Override the Bedrock runtime endpoint.")
    voyage_api_key: SecretStr | None = Field(default=None, description="Voyage AI API key.")
    voyage_model: str = Field(default="voyage-3.5", description="Voyage embedding model.")
    voyage_dimension: int = Field(default=1024, ge=1, le=MAX_DIMENSION, description="Voyage output dimension.")
    voyage_base_url: str = Field(default="https://api.voyageai.com/v1", description="Voyage API base URL.")
    openai_api_key: SecretStr | None = Field(default=None, description="API key of the OpenAI-compatible server.")
    openai_base_url: str = Field(default="https://api.openai.com/v1", description="OpenAI-compatible base URL.")
    openai_model: str = Field(default="text-embedding-3-small", description="Embedding model name.")
    openai_dimension: int = Field(default=1536, ge=1, le=MAX_DIMENSION,
        description="Embedding dimension the model returns.")  # fmt: skip
    openai_answered_model: str | None = Field(default=None,
        description="The name the server answers with for GRANDBO_OPENAI_MODEL, when it answers with another: an "
        "alias (an Azure OpenAI deployment behind a proxy, Hugging Face TEI's model id, a LiteLLM alias). Accepted as "
        "the same model, so the vectors keep their space; any other name is refused.")  # fmt: skip

    # Optional LLM: classifies edits, words learned notes, narrates triage plans (never required).
    llm_provider: Literal["openai", "anthropic", "bedrock"] | None = Field(
        default=None,
        description="Chat API: openai (any OpenAI-compatible server: Groq, vLLM, Ollama), anthropic (Messages) or "
        "bedrock (Converse). Unset: openai when GRANDBO_LLM_BASE_URL is set, else no LLM.",
    )
    llm_base_url: str | None = Field(
        default=None,
        description="Chat endpoint base URL (openai: required; anthropic: default https://api.anthropic.com; "
        "bedrock: overrides the runtime endpoint). Unset with no provider: rules only.",
    )
    llm_model: str | None = Field(
        default=None, description="Chat model name: gpt-4o-mini for openai when unset; anthropic and bedrock need one."
    )
    llm_api_key: SecretStr | None = Field(default=None, description="API key of the chat endpoint.")
    llm_region: str | None = Field(default=None, description="AWS region of Bedrock Converse (else boto3's default).")
    llm_max_tokens: int = Field(default=800, ge=64, le=8192, description="Most tokens a narration may use.")
