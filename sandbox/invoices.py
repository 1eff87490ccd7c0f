"""A billing service built on agent_ledger_downstream (FastAPI + SQLAlchemy on PostgreSQL): the
downstream the ledger reconciles through the library, for the demo, the drills and the tests.

``POST /invoices`` is marked idempotent: the invoice row and the stored response commit in one
transaction, and a key belongs to the caller in ``X-Caller`` (set by a gateway in front).
``GET /idempotency/{key}?scope=<caller>&access_token=...`` is the look-up the ledger's HTTP
adapter reads. With ``INVOICES_FAULTS=1`` a request may carry ``X-Fault``:

- ``exit-before-commit``: the invoice is written, then the process exits before the commit;
- ``exit-after-commit``: the process exits right after the commit, before the response;
- ``hold``: the request holds its transaction open for ``X-Fault-Seconds`` (default 0.5);
- ``commit-early``: the route commits its own session, which the middleware refuses.

Run it with ``python -m sandbox.invoices --port 8026 --database-url postgresql://...``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any
from urllib.parse import unquote, urlsplit

import uvicorn
from fastapi import Depends, FastAPI, Header, HTTPException
from pydantic import BaseModel, Field
from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, event, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from agent_ledger_downstream.asgi import (
    IdempotencyMiddleware,
    token_check,
    transaction_session,
)
from agent_ledger_downstream.asgi import metadata as idempotency_metadata

FAULTS = ("exit-before-commit", "exit-after-commit", "hold", "commit-early")

business = MetaData()
invoices = Table(
    "sandbox_invoices",
    business,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("customer", String(200), nullable=False, index=True),
    Column("amount_cents", Integer, nullable=False),
)


class InvoiceIn(BaseModel):
    customer: str = Field(min_length=1, max_length=200)
    amount_cents: int = Field(gt=0)


def async_url(url: str) -> str:
    """SQLAlchemy's URL for psycopg 3 (asyncio) from a plain ``postgres://`` one. A Unix
    socket's folder, percent-encoded as the host (libpq's form), goes in ``?host=``, where
    SQLAlchemy passes it on."""
    scheme, _, rest = url.partition("://")
    if scheme not in ("postgres", "postgresql"):
        return url
    parts = urlsplit(url)
    userinfo, _, host = parts.netloc.rpartition("@")
    if unquote(host).startswith("/"):
        query = "&".join(filter(None, [f"host={host}", parts.query]))
        return f"postgresql+psycopg://{userinfo}@{parts.path}?{query}"
    return f"postgresql+psycopg://{rest}"


def create_app(database_url: str, *, lookup_token: str, faults: bool = False) -> FastAPI:
    engine = create_async_engine(async_url(database_url), pool_size=10, max_overflow=20)
    sessions = async_sessionmaker(engine, expire_on_commit=False)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with engine.begin() as connection:
            await connection.run_sync(idempotency_metadata.create_all)
            await connection.run_sync(business.create_all)
        yield
        await engine.dispose()

    app = FastAPI(title="Sandbox invoices", lifespan=lifespan)
    app.add_middleware(
        IdempotencyMiddleware,
        sessionmaker=sessions,
        routes=["POST /invoices"],
        check=token_check(lookup_token),
        # Keys belong to the caller the gateway in front of this service authenticated.
        scope=lambda request: request.headers.get("X-Caller", ""),
    )

    @app.post("/invoices", status_code=201)
    async def create_invoice(
        invoice: InvoiceIn,
        session: Annotated[AsyncSession, Depends(transaction_session)],
        x_fault: Annotated[str, Header()] = "",
        x_fault_seconds: Annotated[float, Header()] = 0.5,
    ) -> dict[str, Any]:
        if x_fault and (not faults or x_fault not in FAULTS):
            raise HTTPException(400, f"X-Fault needs INVOICES_FAULTS=1 and one of {FAULTS}")
        result = await session.execute(
            invoices.insert().values(**invoice.model_dump()).returning(invoices.c.id)
        )
        invoice_id = result.scalar_one()
        if x_fault == "exit-before-commit":
            os._exit(17)
        if x_fault == "exit-after-commit":
            event.listen(session.sync_session, "after_commit", lambda _s: os._exit(17))
        if x_fault == "commit-early":
            await session.commit()
        if x_fault == "hold":
            await asyncio.sleep(min(max(x_fault_seconds, 0.0), 30.0))
        # A secret the caller sees once: the stored response keeps it redacted.
        portal_token = secrets.token_urlsafe(16)
        return {"id": invoice_id, **invoice.model_dump(), "portal_token": portal_token}

    @app.get("/invoices/stats")
    async def stats(customer: str = "") -> dict[str, Any]:
        async with sessions() as session:
            query = select(func.count()).select_from(invoices)
            if customer:
                query = query.where(invoices.c.customer == customer)
            return {"invoices": await session.scalar(query), "customer": customer}

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the sandbox billing service.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8026)
    parser.add_argument("--database-url", default=os.environ.get("INVOICES_DATABASE_URL", ""))
    args = parser.parse_args()
    if not args.database_url:
        parser.error("--database-url (or INVOICES_DATABASE_URL) is required")
    token = os.environ.get("INVOICES_LOOKUP_TOKEN", "")
    if not token:
        parser.error("INVOICES_LOOKUP_TOKEN is required: the look-up answers only to it")
    app = create_app(
        args.database_url, lookup_token=token, faults=os.environ.get("INVOICES_FAULTS") == "1"
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
