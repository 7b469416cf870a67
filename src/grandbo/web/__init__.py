"""The web console for on-call engineers: server-rendered pages under `/ui` (triage, the memory explorer,
analytics, the profile and learned notes), signed in with an organization API key.

An interface like the API: every page acts through the org-bound handle of the signed-in key, and only
`grandbo.api.app.create_app` mounts it (`install`). Templates and the stylesheet ship with the package;
there is no script and no front-end build.
"""

from grandbo.web.app import install

__all__ = ["install"]
