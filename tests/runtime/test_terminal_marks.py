"""The command mode's marks (sandstack.runtime.terminal_marks), read from output as the terminal sends it: whole, cut
anywhere, a command's output bounded, a cancel's result."""

from __future__ import annotations

from sandstack.runtime.terminal_marks import MAX_OUTPUT, Marks, typed

OUT = b"noise\x1b]633;C;1\x07one\r\ntwo\r\n\x1b]633;D;1;3\x07$ \x1b]633;C;2\x07\x1b]633;D;2;0\x07"
RESULTS = [{"type": "result", "id": 1, "output": "one\ntwo\n", "exit_code": 3, "truncated": False, "cancelled": False},
           {"type": "result", "id": 2, "output": "", "exit_code": 0, "truncated": False, "cancelled": False}]


def test_whole_output_gives_each_commands_result_without_what_was_around_it():
    assert Marks().feed(OUT) == RESULTS


def test_output_cut_at_every_byte_gives_the_same_results():
    for cut in range(1, len(OUT)):
        marks = Marks()
        assert marks.feed(OUT[:cut]) + marks.feed(OUT[cut:]) == RESULTS, cut


def test_a_commands_output_is_kept_up_to_the_bound_and_said_so():
    marks = Marks()
    marks.feed(b"\x1b]633;C;1\x07" + b"x" * (MAX_OUTPUT + 10))
    [result] = marks.feed(b"\x1b]633;D;1;0\x07")
    assert (len(result["output"]), result["truncated"]) == (MAX_OUTPUT, True)


def test_a_cancel_reports_the_running_command_with_130_and_an_end_mark_of_another_is_ignored():
    marks = Marks()
    assert marks.cancel() is None  # nothing running
    marks.feed(b"\x1b]633;C;4\x07waiting\r\n")
    assert marks.cancel() == {"type": "result", "id": 4, "output": "waiting\n", "exit_code": 130, "truncated": False,
                              "cancelled": True}
    assert marks.feed(b"\x1b]633;D;4;0\x07") == []


def test_what_the_shell_is_given_prints_the_marks_around_the_command():
    assert typed(7, "make test") == (b"printf '\\033]633;C;7\\007'\nmake test\n"
                                     b"printf '\\033]633;D;7;%s\\007' \"$?\"\n")


def test_a_sync_mark_is_noted_and_never_part_of_a_commands_output():
    marks = Marks()
    assert marks.feed(b"\x1b]633;S;3\x07\x1b]633;C;1\x07x\x1b]633;S;4\x07y\r\n\x1b]633;D;1;0\x07")[0]["output"] == "xy\n"
    assert marks.synced == {3, 4}
