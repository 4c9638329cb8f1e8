import sys

import pytest

from tests.commands import run_command


def test_a_command_past_its_limit_fails_the_test_with_its_output():
    code = "import sys, time; print('started', flush=True); print('warming up', file=sys.stderr, flush=True); time.sleep(30)"
    with pytest.raises(pytest.fail.Exception, match=r"(?s)still running after 1 s.*started.*warming up"):
        run_command([sys.executable, "-c", code], timeout=1)
    assert run_command([sys.executable, "-c", "print('done')"], timeout=60).stdout == "done\n"
