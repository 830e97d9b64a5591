from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading

import pytest

from ludic_core.threads import run_in_daemon_thread


async def test_returns_the_result_and_runs_off_the_event_loop() -> None:
    loop_thread = threading.get_ident()
    ident = await run_in_daemon_thread(threading.get_ident)
    assert ident != loop_thread


async def test_exceptions_reach_the_awaiting_coroutine() -> None:
    def fail() -> None:
        raise ValueError("bad input 7")

    with pytest.raises(ValueError, match="bad input 7"):
        await run_in_daemon_thread(fail)


async def test_a_timeout_returns_at_once_while_the_call_is_stuck() -> None:
    release, finished = threading.Event(), threading.Event()

    def stuck() -> None:
        release.wait(30.0)
        finished.set()

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(run_in_daemon_thread(stuck), timeout=0.2)
    # The timeout returned while the call was still stuck: it did not wait for it.
    assert not finished.is_set()
    release.set()


def test_an_abandoned_call_does_not_hold_up_process_exit() -> None:
    # asyncio.to_thread's executor threads are joined at exit: this script would then take 60 s.
    script = textwrap.dedent(
        """
        import asyncio, time
        from ludic_core.threads import run_in_daemon_thread

        async def main():
            try:
                await asyncio.wait_for(run_in_daemon_thread(lambda: time.sleep(60)), timeout=0.2)
            except TimeoutError:
                print("timed out")

        asyncio.run(main())
        """
    )
    # Joined at exit, the abandoned call would hold the script for 60 s: past run()'s 30 s limit.
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "timed out"
