"""A role's loop (dagster-daemon style): ``step()`` repeated until a stop event; tests call ``step()``."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod


class LoopRole(ABC):
    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def step(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    def run(self, stop: threading.Event) -> None:
        self.start()
        try:
            while not stop.is_set():
                self.step()
        finally:
            self.close()
