"""The profiler's C++ log lines go to profiler.log; the script's own stderr passes through
unchanged and in order, partial lines (progress bars) included."""

import subprocess
import sys
import textwrap

from conftest import ROOT

from torchpace.capture.profiler_log import LOG_NAME, summarize

LOG_LINES = [
    "[W1123 19:10:00.123456 4242 CPUAllocator.cpp:249] Memory block of unknown size was "
    "allocated before the profiling started, profiler results will not include the "
    "deallocation event",
    "[W CPUAllocator.cpp:249] Memory block of unknown size was allocated before the profiling",
    "STAGE:2024-05-01 10:00:00 42:42 ActivityProfilerController.cpp:312] Completed Stage: Warm Up",
    "[E1123 19:10:01.000001 4242 kineto_shim.cpp:110] profiler_start failed: no CUPTI",
    "ERROR:2024-05-01 10:00:00 42:42 CuptiActivityProfiler.cpp:205] CUPTI_ERROR_NOT_INITIALIZED",
    # seen on this CPU with torch 2.14, at every profiler start and stop
    "USDT:2026-11-23 19:27:29 8732:8732 SyncActivityProfilerHandler.cpp:39] profiler_start",
]
USER_LINES = [
    "epoch 1 loss 2.31",
    "[rank0] all good",  # bracketed, but no source file: the user's
    "Error: a user's own message about a .cpp file",  # not a log line's shape
    "W&B syncing 3 files",
]


def run_filtered(tmp_path, body: str) -> subprocess.CompletedProcess:
    code = (
        textwrap.dedent(
            f"""
        import os, sys
        from torchpace.capture.profiler_log import StderrFilter
        f = StderrFilter({str(tmp_path / LOG_NAME)!r})
        print("before", file=sys.stderr, flush=True)
        f.start()
        """
        )
        + textwrap.dedent(body)
        + textwrap.dedent(
            """
        f.stop()
        print("after", file=sys.stderr, flush=True)
        """
        )
    )
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=env, timeout=60, check=True
    )


def test_log_lines_go_to_the_file_and_the_rest_through_in_order(tmp_path):
    lines = [
        LOG_LINES[0],
        USER_LINES[0],
        LOG_LINES[1],
        USER_LINES[1],
        LOG_LINES[2],
        USER_LINES[2],
        LOG_LINES[3],
        USER_LINES[3],
        LOG_LINES[4],
        LOG_LINES[5],
    ]
    body = "\n".join(
        # half through os.write(2) as C++ code writes, half through sys.stderr as Python does
        f"os.write(2, {(line + chr(10)).encode()!r})"
        if i % 2
        else f"print({line!r}, file=sys.stderr, flush=True)"
        for i, line in enumerate(lines)
    )
    proc = run_filtered(tmp_path, body)
    assert proc.stderr.decode().splitlines() == ["before", *USER_LINES, "after"]
    assert (tmp_path / LOG_NAME).read_text().splitlines() == LOG_LINES
    summary = summarize(tmp_path)
    assert summary.lines == 6
    assert summary.errors == [LOG_LINES[3], LOG_LINES[4]]


def test_a_progress_bar_passes_without_waiting_for_a_newline(tmp_path):
    body = """
        import time
        for i in range(3):
            os.write(2, f"\\r {i}/3 |{'#' * i}".encode())
        # the filter has passed the partial line on before the window closes
        time.sleep(0.3)
        os.write(2, b" done\\n")
        """
    proc = run_filtered(tmp_path, body)
    assert proc.stderr.decode() == "before\n\r 0/3 |\r 1/3 |#\r 2/3 |## done\nafter\n"
    assert summarize(tmp_path) is None  # nothing logged: no file, or an empty one


def test_a_crash_in_the_window_still_reaches_the_terminal(tmp_path):
    code = textwrap.dedent(
        f"""
        import os, sys
        from torchpace.capture.profiler_log import StderrFilter
        StderrFilter({str(tmp_path / LOG_NAME)!r}).start()
        os.write(2, b"native crash: SIGSEGV\\n")
        os._exit(139)
        """
    )
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=60)
    assert proc.returncode == 139
    assert b"native crash: SIGSEGV" in proc.stderr


def test_a_log_line_written_in_pieces_is_still_kept_out(tmp_path):
    """C++ loggers may write a line's prefix and its message in separate writes."""
    body = """
        import time
        os.write(2, b"USDT:2026-11-23 19:38:17 21123:21123 ")
        time.sleep(0.05)
        os.write(2, b"SyncActivityProfilerHandler.cpp:46] profiler_stop\\n")
        os.write(2, b"Enter a number: ")  # a prompt: let through after a moment
        time.sleep(0.5)
        """
    proc = run_filtered(tmp_path, body)
    assert proc.stderr.decode() == "before\nEnter a number: after\n"
    assert summarize(tmp_path).lines == 1
