"""A terminal's command mode (`?mode=command`, docs/design/runtime.md "Processes and terminals"): each command sent
as `{"type": "run", "command": "..."}` is typed into the shell between two marks, and its output and exit status come
back apart, as `{"type": "result", "id": N, "output": "...", "exit_code": S}` — what agents want from a terminal (one
product's terminal has this mode), with the terminal's bytes still streamed as they are.

The marks are OSC 633 sequences (what editors' shell integration prints; a terminal shows nothing for them): before
the command `ESC ] 633 ; C ; <id> BEL`, after it `ESC ] 633 ; D ; <id> ; <status> BEL`, printed by the shell itself
(`printf`), so any POSIX shell has them — no prompt hooks, no bash needed. A command is typed on a line of its own and
its end mark on the next, so `$?` is the command's status.

"A new command cancels the previous one" (`cancel: true`): the runtime types Ctrl-C first; the terminal's line
discipline kills the running command and drops what was typed after it (its end mark among them), so the previous
command is reported here with exit code 130 and `cancelled: true`. The line discipline takes the Ctrl-C a moment
after it was typed (on the engine, the command typed right after it was dropped too), so the runtime then types
sync lines until one's mark (`S`) comes back, and only then the new command. A Ctrl-C can also find nothing to
interrupt (between two commands of a list, before the next one started, the shell let it pass and the list went on):
while no mark comes back, the Ctrl-C is typed again every fourth sync line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

START = b"\x1b]633;C;%d\x07"
END = re.compile(rb"\x1b\]633;D;(\d+);(\d+)\x07")
MARK = re.compile(rb"\x1b\]633;([CDS]);(\d+)(?:;(\d+))?\x07")
INTERRUPTED = 130  # a shell's status for a command ended by SIGINT (128 + 2)
MAX_OUTPUT = 1024 * 1024  # bytes of one command's output kept for its result (the stream has all of it)
KEEP_TAIL = 64  # bytes of an unfinished mark kept between two reads


# Typed once when the terminal opens in command mode: no prompts between the marks, no echo of what is typed.
SETUP = b"PS1='' PS2=''; stty -echo 2>/dev/null\n"


def typed(command_id: int, command: str) -> bytes:
    """What the shell is given for one command: its start mark, the command, its end mark with `$?`."""
    return (f"printf '\\033]633;C;{command_id}\\007'\n{command}\n"
            f"printf '\\033]633;D;{command_id};%s\\007' \"$?\"\n").encode()


def synced_line(number: int) -> bytes:
    """A line that only prints a sync mark. The terminal takes a Ctrl-C (drops what is queued) some time after it was
    typed, so a command typed right after it may be dropped too: these lines are typed until one's mark comes back,
    and only then the command."""
    return f"printf '\\033]633;S;{number}\\007'\n".encode()


@dataclass
class Marks:
    """Reads the terminal's output and yields each finished command's result."""

    running: int | None = None  # the command whose start mark came and whose end mark did not yet
    synced: set[int] = field(default_factory=set)  # sync marks seen (after a Ctrl-C: `synced_line`)
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    _tail: bytes = b""

    def feed(self, data: bytes) -> list[dict]:
        results: list[dict] = []
        text, self._tail = self._tail + data, b""
        position = 0
        for match in MARK.finditer(text):
            self._keep(text[position:match.start()])
            position = match.end()
            kind, number = match.group(1), int(match.group(2))
            if kind == b"S":
                self.synced.add(number)
            elif kind == b"C":
                self.running, self.output, self.truncated = number, bytearray(), False
            elif self.running == number:
                results.append(self._finish(int(match.group(3) or 0)))
        rest = text[position:]
        start = rest.rfind(b"\x1b")
        if start != -1 and b"\x07" not in rest[start:] and len(rest) - start <= KEEP_TAIL:
            rest, self._tail = rest[:start], rest[start:]  # maybe a mark cut in two reads
        self._keep(rest)
        return results

    def cancel(self) -> dict | None:
        """The running command's result once Ctrl-C was typed (its end mark will not come)."""
        return self._finish(INTERRUPTED, cancelled=True) if self.running is not None else None

    def _keep(self, data: bytes) -> None:
        if self.running is None or not data:
            return
        room = MAX_OUTPUT - len(self.output)
        self.output += data[:room]
        self.truncated = self.truncated or len(data) > room

    def _finish(self, status: int, cancelled: bool = False) -> dict:
        # The terminal ends lines with CR LF (its `onlcr`); a command's output is given as the command wrote it.
        output = self.output.decode(errors="replace").replace("\r\n", "\n")
        result = {"type": "result", "id": self.running, "output": output,
                  "exit_code": status, "truncated": self.truncated, "cancelled": cancelled}
        self.running, self.output, self.truncated = None, bytearray(), False
        return result
