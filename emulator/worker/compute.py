"""The worker's one torch thread: every forward pass, cache copy and prefix-store access runs here.

One thread keeps the event loop free for sockets and makes the model and the prefix store
single-threaded by construction. It does not decide what to run (the engines do).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

T = TypeVar("T")


def _init_thread(num_threads: int) -> None:
    # torch's intra-op thread count is per calling thread under OpenMP, so the setting made in
    # the main thread does not reach this one by itself.
    torch.set_num_threads(num_threads)


class ComputeThread:
    def __init__(self, num_threads: int) -> None:
        if num_threads < 1:
            raise ValueError(f"num_threads: {num_threads} must be at least 1")
        self.num_threads = num_threads
        torch.set_num_threads(num_threads)
        self._pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="torch", initializer=_init_thread,
            initargs=(num_threads,))

    async def call(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        """Run `fn(*args, **kwargs)` on the torch thread; the loop keeps running meanwhile."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def shutdown(self) -> None:
        """Drop queued work; a forward pass already running finishes on its own."""
        self._pool.shutdown(wait=False, cancel_futures=True)
