"""How a call names a session: by its key, in a tenant (the ledger's default tenant when
the call names none); the pair is the session's id."""

from __future__ import annotations

import uuid

from .inputs import check_key, check_tenant
from .session import session_id


class SessionAddresses:
    """The ledger's default tenant, and the session id a (tenant, key) names."""

    def __init__(self, default_tenant: str) -> None:
        self.default_tenant = check_tenant(default_tenant)

    def tenant(self, tenant: str | None) -> str:
        """`tenant` checked, or the default tenant when None."""
        return self.default_tenant if tenant is None else check_tenant(tenant)

    def session_id(self, key: str, tenant: str | None) -> uuid.UUID:
        """The id of session `key` of `tenant` (the default when None), both checked."""
        return session_id(self.tenant(tenant), check_key(key))
