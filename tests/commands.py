"""Running a command from a test: its output captured as text, its own time limit reported with that output."""

import shlex
import subprocess
from typing import Any

import pytest


def run_command(command: list[str], *, timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """
    ``subprocess.run`` with stdout and stderr captured as text. A command still running after ``timeout`` seconds
    fails the test with the ends of what it printed (pytest-timeout would show only the test's stack); a test that
    calls this keeps its own pytest timeout above the sum of its commands' limits.
    """
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(
            f"{shlex.join(map(str, command))} was still running after {timeout} s\n"
            f"stdout (end):\n{_text(expired.stdout)[-3000:]}\nstderr (end):\n{_text(expired.stderr)[-3000:]}"
        )


def _text(output: bytes | str | None) -> str:
    """TimeoutExpired carries bytes even when the command's output was read as text."""
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""
