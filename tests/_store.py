"""Reading and writing the store's tables directly, for tests: what no product code needs."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import func, select

from askback.store import Completion, RoundRecord, Store
from askback.store.models import EffectRow, FlowRow


async def count_effects(store: Store, name: str | None = None) -> int:
    """How many effects are claimed (running or done), all of them or those called `name`."""
    query = select(func.count()).select_from(EffectRow)
    if name is not None:
        query = query.where(EffectRow.name == name)
    async with store.database.engine.connect() as conn:
        return (await conn.execute(query)).scalar_one()


async def record_completion(
    store: Store, flow_id: str, *, tool: str, principal: str | None, result: Any, at: float
) -> Completion:
    """Record a flow's result the way the end of a round does (the first one recorded wins)."""
    completion = await store.flows.finish_flow(RoundRecord(flow_id, at, tool=tool, principal=principal, result=result))
    assert completion is not None
    return completion


async def completion(store: Store, flow_id: str) -> Any | None:
    """The stored result of flow `flow_id`, or `None` if it has not completed."""
    async with store.database.engine.connect() as conn:
        stored = (await conn.execute(select(FlowRow.result).where(FlowRow.flow_id == flow_id))).scalar()
    return None if stored is None else json.loads(stored)
