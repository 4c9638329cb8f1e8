"""
The profilers' one timing helper: wall and CPU seconds of named sections, accumulated by name.

A section is timed as a block (:meth:`SectionTimer.section`), as a wrapped callable (:meth:`SectionTimer.wrap`; a
generator function at each resumption), as public methods patched for the length of a block
(:meth:`SectionTimer.patched`, which raises when a method does not exist: a renamed hook makes the profiler fail,
never time nothing) or from a mark to now (:meth:`SectionTimer.mark`, :meth:`SectionTimer.add_since`: between two
callbacks). Sections nest: a section's seconds are its own, without those of the sections timed inside it, so the
sections add up to the time they cover. CPU seconds are this process's (all its threads) and those of the child
processes it has waited for. :func:`busy_processes` loads the machine beside a measurement.
"""

import contextlib
import functools
import inspect
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock


def cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of the children it has waited for (user + system)."""
    times = os.times()
    return time.process_time() + times.children_user + times.children_system


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[list[subprocess.Popen]]:
    """
    ``count`` CPU-bound processes (a Python busy loop each, in a session of its own) for the length of the block,
    then killed and reaped, on an error or Ctrl-C too. Their CPU time is not in :func:`cpu_seconds` measured inside
    the block: they are reaped after it.
    """
    processes: list[subprocess.Popen] = []
    try:
        for _ in range(count):
            processes.append(
                subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True, stdin=subprocess.DEVNULL)
            )
        yield processes
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        for process in processes:
            process.wait()


EXHAUSTED = object()  # what a timed generator's next() returns at its end


@dataclass
class Timing:
    """Wall and CPU seconds of a section (its own: without the sections timed inside it) and the times it ran."""

    wall: float = 0.0
    cpu: float = 0.0
    calls: int = 0


@dataclass(frozen=True)
class Mark:
    """A moment to time a section from (:meth:`SectionTimer.mark`)."""

    wall: float
    cpu: float
    enclosing: "OpenSection"  # the section open at the mark (or the top level)
    inner_wall: float  # seconds of the sections timed inside it so far
    inner_cpu: float


@dataclass
class OpenSection:
    """A section being timed: its start and the seconds of the sections timed inside it so far."""

    wall: float
    cpu: float
    inner_wall: float = 0.0
    inner_cpu: float = 0.0


class SectionTimer:
    """Wall and CPU seconds of named sections, accumulated by name in :attr:`sections` (see the module docstring)."""

    def __init__(self) -> None:
        self.sections: dict[str, Timing] = {}
        self._open: list[OpenSection] = []
        self._top = OpenSection(0.0, 0.0)  # the seconds of the sections timed outside any other

    def seconds(self, name: str) -> float:
        """Wall seconds of section ``name`` (0 if it never ran)."""
        return self.sections[name].wall if name in self.sections else 0.0

    def calls(self, name: str) -> int:
        """The times section ``name`` ran."""
        return self.sections[name].calls if name in self.sections else 0

    def _enclosing(self) -> OpenSection:
        """The innermost open section (or the top level, outside any)."""
        return self._open[-1] if self._open else self._top

    def _record(self, name: str, wall: float, cpu: float, inner_wall: float, inner_cpu: float) -> Timing:
        """
        Add a run of section ``name`` to its totals: ``wall`` and ``cpu`` seconds from its start to its end, less
        ``inner_wall`` and ``inner_cpu``, the time of the sections timed inside it; the enclosing section counts the
        run as inner time. Its own timing.
        """
        own = Timing(wall - inner_wall, cpu - inner_cpu, 1)
        total = self.sections.setdefault(name, Timing())
        total.wall, total.cpu, total.calls = total.wall + own.wall, total.cpu + own.cpu, total.calls + 1
        enclosing = self._enclosing()
        enclosing.inner_wall += wall
        enclosing.inner_cpu += cpu
        return own

    @contextlib.contextmanager
    def section(self, name: str) -> Iterator[Timing]:
        """Time the block as section ``name``; yields the block's own timing, filled in when it ends."""
        timing = Timing()
        self._open.append(OpenSection(time.perf_counter(), cpu_seconds()))
        try:
            yield timing
        finally:
            opened = self._open.pop()
            wall, cpu = time.perf_counter() - opened.wall, cpu_seconds() - opened.cpu
            own = self._record(name, wall, cpu, opened.inner_wall, opened.inner_cpu)
            timing.wall, timing.cpu, timing.calls = own.wall, own.cpu, own.calls

    def wrap(self, function: Callable, name: str) -> Callable:
        """``function`` timed as section ``name`` at each call (a generator function: at each resumption)."""
        if inspect.isgeneratorfunction(function):

            @functools.wraps(function)
            def timed_generator(*args: Any, **kwargs: Any) -> Iterator[Any]:
                iterator = function(*args, **kwargs)
                try:
                    while True:
                        with self.section(name):
                            item = next(iterator, EXHAUSTED)
                        if item is EXHAUSTED:
                            return
                        yield item
                finally:
                    iterator.close()

            return timed_generator

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.section(name):
                return function(*args, **kwargs)

        return timed

    @contextlib.contextmanager
    def patched(self, *hooks: tuple[Any, str, str]) -> Iterator[None]:
        """
        Each ``(owner, method, section)`` of ``hooks`` timed for the length of the ``with`` block: ``owner.method``
        (a public method of a class or an object, or a public function of a module) replaced by its timed wrapper,
        a classmethod or staticmethod kept one. Every method is looked up before any is replaced: ``AttributeError``
        if one does not exist (renamed or removed), ``ValueError`` for a private name, ``TypeError`` for an attribute
        that is not callable.
        """
        replacements = [(owner, method, self._timed_attribute(owner, method, name)) for owner, method, name in hooks]
        with contextlib.ExitStack() as stack:
            for owner, method, replacement in replacements:
                stack.enter_context(mock.patch.object(owner, method, replacement))
            yield

    def _timed_attribute(self, owner: Any, method: str, name: str) -> Any:
        """What replaces ``owner.method`` while it is timed as section ``name``."""
        if method.startswith("_"):
            raise ValueError(f"{method!r} is private: the profilers time public methods only")
        try:
            static = inspect.getattr_static(owner, method)
        except AttributeError:
            raise AttributeError(
                f"{owner!r} has no method {method!r} to time as section {name!r}: was it renamed or removed?"
            ) from None
        if isinstance(owner, type) and isinstance(static, classmethod | staticmethod):
            return type(static)(self.wrap(static.__func__, name))
        attribute = getattr(owner, method)
        if not callable(attribute):
            raise TypeError(f"{owner!r}.{method} is not callable: it cannot be timed as section {name!r}")
        return self.wrap(attribute, name)

    def mark(self) -> Mark:
        """Now, to time a section from with :meth:`add_since` (inside the same open section)."""
        enclosing = self._enclosing()
        return Mark(time.perf_counter(), cpu_seconds(), enclosing, enclosing.inner_wall, enclosing.inner_cpu)

    def add_since(self, mark: Mark, name: str) -> Timing:
        """Time from ``mark`` to now as section ``name`` (less the sections timed in between); its own timing."""
        enclosing = self._enclosing()
        if enclosing is not mark.enclosing:
            raise RuntimeError(f"section {name!r}: the section open at its mark is no longer the innermost one")
        # The sections timed since the mark ran inside the enclosing one: their time is already its inner time.
        inner_wall, inner_cpu = enclosing.inner_wall - mark.inner_wall, enclosing.inner_cpu - mark.inner_cpu
        enclosing.inner_wall, enclosing.inner_cpu = mark.inner_wall, mark.inner_cpu
        return self._record(name, time.perf_counter() - mark.wall, cpu_seconds() - mark.cpu, inner_wall, inner_cpu)

    def require(self, *names: str) -> None:
        """``RuntimeError`` naming the sections of ``names`` that never ran: hooks that are no longer called."""
        missing = [name for name in names if self.calls(name) == 0]
        if missing:
            raise RuntimeError(f"sections {missing} were never timed: is each method behind them still called?")
