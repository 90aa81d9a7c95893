"""``connection=`` given SQLAlchemy's objects: a ``Session`` or a ``Connection`` (and their
async faces) is unwrapped to the driver connection under it, so a run commits or rolls
back with the application's ORM transaction. On both stores (``postgresql+psycopg`` and
``sqlite``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import Store
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from simpleworkflow import Client, RunStatus, config, errors

TYPE = "shop.order.confirm.v1"


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str]


def engine_url(store: Store, driver: str = "psycopg") -> str:
    if store.kind == "sqlite":
        return f"sqlite:///{config.sqlite_path(store.url)}"
    return store.url.replace("postgresql://", f"postgresql+{driver}://", 1)


def connect_args(store: Store) -> dict[str, Any]:
    return {} if store.kind == "sqlite" else {"options": f"-c search_path={store.schema}"}


@pytest.fixture
def engine(store: Store) -> Any:
    made = sa.create_engine(engine_url(store), connect_args=connect_args(store))
    Base.metadata.create_all(made)
    yield made
    made.dispose()


def committed(store: Store) -> tuple[int, int]:
    return store.count("workflow_run"), store.count("orders")


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_run_started_on_a_session_commits_and_rolls_back_with_it(
    store: Store, engine: Any, client: Client, outcome: str
) -> None:
    with Session(engine) as session:
        session.add(Order(id=1, item="book"))
        session.flush()
        run = client.start(TYPE, {"order": 1}, connection=session)
        assert committed(store) == (0, 0)
        getattr(session, outcome)()
    if outcome == "commit":
        assert committed(store) == (1, 1)
        assert client.get(run.id).status is RunStatus.PENDING
    else:
        assert committed(store) == (0, 0)
        with pytest.raises(errors.RunNotFound):
            client.get(run.id)


def test_a_run_started_on_a_connection_commits_with_its_transaction(
    store: Store, engine: Any, client: Client
) -> None:
    with engine.begin() as conn:  # commits at the end of the block
        conn.execute(sa.insert(Order).values(id=2, item="pen"))
        run = client.start(TYPE, {"order": 2}, connection=conn)
        assert committed(store) == (0, 0)
    assert committed(store) == (1, 1)
    assert client.get(run.id).payload == {"order": 2}
    with engine.connect() as conn:  # the run is the session's first statement
        client.start(TYPE, {"order": 3}, connection=conn)
        conn.rollback()
    assert committed(store) == (1, 1)


def test_the_async_faces_are_unwrapped_by_the_async_client(store: Store) -> None:
    if store.kind == "sqlite":
        pytest.skip("the async SQLite driver (aiosqlite) is not the stdlib's sqlite3")
    store.sql("create table orders (id integer primary key, item text not null)")

    async def main() -> tuple[str, str]:
        engine = create_async_engine(engine_url(store), connect_args=connect_args(store))
        try:
            async with store.async_client() as client:
                async with AsyncSession(engine) as session:
                    session.add(Order(id=4, item="cup"))
                    await session.flush()
                    kept = await client.start(TYPE, {"order": 4}, connection=session)
                    await session.commit()
                async with engine.connect() as conn:
                    dropped = await client.start(TYPE, {"order": 5}, connection=conn)
                    await conn.rollback()
                return kept.id, dropped.id
        finally:
            await engine.dispose()

    kept, dropped = asyncio.run(main())
    assert committed(store) == (1, 1)
    with store.client() as client:
        assert client.get(kept).status is RunStatus.PENDING
        with pytest.raises(errors.RunNotFound):
            client.get(dropped)


def test_an_async_session_given_to_the_blocking_client_is_refused(store: Store) -> None:
    if store.kind == "sqlite":
        pytest.skip("async SQLAlchemy here is Postgres's")
    engine = create_async_engine(engine_url(store))
    session = AsyncSession(engine)
    with store.client() as client, pytest.raises(errors.InvalidArgument, match="AsyncClient"):
        client.start(TYPE, connection=session)
    assert store.count("workflow_run") == 0
