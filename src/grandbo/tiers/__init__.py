"""The tiers of an organization's memory, each reached through the org-bound handle (`OrgMemory`).

Episodic incidents and findings (`incidents`), semantic runbooks and post-mortems with the effectiveness
ledger, the service catalog and the org's settings (`runbooks`, `effectiveness`, `topology`,
`operations`), the explicit profile (`profile`), rules learned from edits (`learning`), the context block
(`context`), and import/export (`transfer`). They use the handle's seams and a document repository bound
to the org; none of them sees a store or names an organization.
"""
