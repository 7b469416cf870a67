"""The REST API (`grandbo serve`): FastAPI routes over the org-bound handle, org API keys, webhooks."""
