"""What the main job shows on a new machine: its own lines and progress bars, no library's bars, notes or blank lines."""

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what transformers, vLLM and torch print at a start unless told otherwise (seen on a fresh clone's `make run`)
FOREIGN = ("Loading weights", "Loading safetensors checkpoint shards", "Writing model shards",
           "Converting and de-quantizing GGUF tensors", "NUMA binding", "INFO ")


def screen(text: str) -> list[str]:
    """The lines a terminal ends up showing: each line's last carriage-return segment (a bar's last state)."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)  # cursor and colour escapes
    return [line.rsplit("\r", 1)[-1] for line in text.replace("\r\n", "\n").split("\n")][:-1]


def in_a_terminal(cmd: list[str], env: dict, timeout: float) -> tuple[int, str]:
    """Run `cmd` with its stdout and stderr on a pseudo-terminal of 40 x 160 (as `make run` in a shell: progress bars
    redraw in place there, and a pipe would show every redraw); (exit code, what it printed)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([master], [], [], 1.0)[0]:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child has closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    else:
        proc.kill()
    os.close(master)
    return proc.wait(), b"".join(chunks).decode(errors="replace")


def test_screen_keeps_a_bars_last_state_and_blank_lines():
    assert screen("a\rb\rc\n\nd\n") == ["c", "", "d"]


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_the_main_job_prints_only_its_own_lines_on_a_new_machine(tmp_path):
    # the embedded model de-quantized anew (a new machine's first run), vLLM's engine on CPU, one short step
    env = dict(os.environ, RL_MATH_CACHE=str(tmp_path / "cache"))
    env.pop("RL_MATH_VERBOSE", None)
    rc, printed = in_a_terminal([sys.executable, "lite_ppo.py", "--total-steps", "1", "--prompts-per-step", "2",
                                 "--group-size", "2", "--max-new-tokens", "16", "--eval-size", "2", "--eval-samples", "2",
                                 "--precision", "fp32", "--output-dir", str(tmp_path / "runs"), "--run-name", "run"],
                                env, timeout=900)
    lines = screen(printed)
    assert rc == 0, printed[-3000:]
    foreign = [line for line in lines if any(f in line for f in FOREIGN)]
    assert not foreign, "\n".join(foreign)
    assert all(line.strip() for line in lines), lines  # no blank line
    assert any(line.startswith("step 1: held-out accuracy") for line in lines), lines  # above the bar, not in it
    text = "\n".join(lines)
    for ours in ("precision: fp32 (--precision fp32", "model: smollm2-135m-instruct, first use: de-quantizing its GGUF",
                 "held-out accuracy before step 0:", "lite_ppo: 100%", "held-out avg@2 at step 1:", "run in "):
        assert ours in text, text


def test_the_engine_starts_native_lines_are_kept_but_blank_lines_notes_and_redraws(capfd):
    from common.vllm_internals import native_output_filtered

    with native_output_filtered():
        os.write(2, b"Loading: 10%\rLoading: 100%\n\n[W utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy x\n")
        os.write(1, b"WARNING a real one\n")
    assert capfd.readouterr().err == "Loading: 100%\nWARNING a real one\n"
