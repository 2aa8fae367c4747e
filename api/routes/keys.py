"""API key routes: an admin creates, lists and revokes its own tenant's keys.

Keys of other tenants do not exist for it (404). Keys for a new tenant come from the
CLI (`session-ledger keys create --tenant ...`), which works on the store directly.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from ..deps import AdminDep, KeyStoreDep
from ..http_errors import ERROR_RESPONSES
from ..keystore import KeyRecord
from ..large_bodies import LargeBodyRoute
from ..schemas import ApiKey, ApiKeyList, CreatedApiKey, KeyCreate

router = APIRouter(
    prefix="/v1/keys", tags=["keys"], responses=ERROR_RESPONSES,
    route_class=LargeBodyRoute,  # (its JSON decoded as every write's: a repeated key refused)
)  # fmt: skip


def key_out(record: KeyRecord) -> ApiKey:
    return ApiKey(
        id=record.id, tenant=record.tenant, role=record.role,  # type: ignore[arg-type]
        name=record.name, created_at=record.created_at, revoked_at=record.revoked_at,
    )  # fmt: skip


@router.post("", response_model=CreatedApiKey, status_code=201)
def create_key(body: KeyCreate, store: KeyStoreDep, admin: AdminDep) -> CreatedApiKey:
    """Create an API key in the caller's tenant; its secret is in this answer only."""
    record, secret = store.create(admin.tenant, body.role, body.name)
    return CreatedApiKey(**key_out(record).model_dump(), key=secret)


@router.get("", response_model=ApiKeyList)
def list_keys(store: KeyStoreDep, admin: AdminDep) -> ApiKeyList:
    """The caller's tenant's keys, revoked ones included (never their secrets)."""
    return ApiKeyList(keys=[key_out(r) for r in store.list(admin.tenant)])


@router.delete("/{key_id}", response_model=ApiKey)
def revoke_key(
    key_id: Annotated[str, Path(max_length=64)], store: KeyStoreDep, admin: AdminDep
) -> ApiKey:
    """Revoke a key of the caller's tenant: it stops working at once."""
    return key_out(store.revoke(key_id, admin.tenant))
