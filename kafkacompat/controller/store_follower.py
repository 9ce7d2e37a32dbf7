"""An in-memory copy of a named-entity config store kept in step with it (client-metrics
subscriptions, group configs): the store is watched (set up before the first read, so no change
slips between them), re-read whenever the watch fires or this broker changed it, and every
``refresh_seconds`` as a safety net. A store outage keeps the last copy and retries next round."""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

import trio

from kafkacompat.controller.store import StoreError

log = logging.getLogger("kafkacompat.configs")


class StoreFollower:
    def __init__(self, store: "Callable[[], Any] | None", apply: Callable[[Mapping[str, Mapping[str, str]]], None],
                 what: str, refresh_seconds: float) -> None:
        self._store = store  # called each time: a single node's store exists once its data dir is open
        self._apply = apply
        self._what = what
        self._refresh_seconds = refresh_seconds
        self._nudge = trio.Event()
        self._watching = False

    def changed(self) -> None:
        """Something changed the stored entities: re-read them now."""
        self._nudge.set()

    async def refresh(self) -> None:
        if self._store is not None:
            self._apply(await self._store().read_all())

    async def run(self, *, every_round: Callable[[], None] | None = None,
                  task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Load (before ``task_status.started``), then follow the store forever."""
        await self._reload()
        task_status.started()
        while True:
            with trio.move_on_after(self._refresh_seconds):
                await self._nudge.wait()
            self._nudge = trio.Event()
            await self._reload()
            if every_round is not None:
                every_round()

    async def _reload(self) -> None:
        if self._store is None:
            return
        try:
            if not self._watching:
                await self._store().watch(self.changed)
                self._watching = True
            await self.refresh()
        except StoreError as exc:  # the next round retries
            log.warning("%s not reloaded: the metadata store is unavailable (%s)", self._what, exc)
